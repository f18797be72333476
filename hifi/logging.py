"""structlog set-up: JSON lines for machines, readable console lines for people, secrets masked in both."""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from hifi.redaction import mask_event

LogFormat = Literal["auto", "json", "console"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(log_format: LogFormat = "auto", level: str = "INFO") -> None:
    """Route structlog (and stdlib logging from libraries) to stderr in the chosen format."""
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
    # aiokafka and uvicorn log through the standard library; keep them quiet unless they warn.
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(name)s %(levelname)s %(message)s"
    )
    for noisy in ("aiokafka", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
