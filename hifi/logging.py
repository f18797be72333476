"""structlog set-up: JSON lines for machines, readable console lines for people, secrets masked in both.

Libraries that log through the standard library (aiokafka, uvicorn) go through the same
processors and renderer, so their lines are JSON too, carry the same context (`dest`, bound with
`structlog.contextvars` by the daemons) and are masked like hifi's own.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from hifi.redaction import mask_event

LogFormat = Literal["auto", "json", "console"]
_LIBRARIES = ("aiokafka", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore")


def configure_logging(
    log_format: LogFormat = "auto", level: str = "INFO", *, libraries: bool = True
) -> None:
    """Route structlog and stdlib logging from libraries to stderr in the chosen format;
    `libraries=False` silences the libraries (a `--check` says what it found itself)."""
    use_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    numeric_level = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, mask_event, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                mask_event,
                renderer,
            ],
        )
    )
    handler.addFilter(_unretrieved_connection_errors)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(max(numeric_level, logging.WARNING))
    # Libraries speak only when they warn; hifi's own lines say what they do.
    library_level = max(numeric_level, logging.WARNING) if libraries else logging.CRITICAL + 1
    for name in _LIBRARIES:
        logging.getLogger(name).setLevel(library_level)


def _unretrieved_connection_errors(record: logging.LogRecord) -> bool:
    """Drop asyncio's "Future exception was never retrieved" for a connection error: aiokafka
    leaves the futures of a connection that failed (refused, reset, a TLS alert) unretrieved
    after it has closed the connection and its client has reported the failure, and asyncio
    says so whenever they are collected, as a traceback in the middle of a one-line error."""
    if record.name != "asyncio" or not record.exc_info:
        return True
    error = record.exc_info[1]
    unretrieved = str(record.msg).startswith("Future exception was never retrieved")
    return not (unretrieved and isinstance(error, OSError | EOFError))
