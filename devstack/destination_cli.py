"""Command line that runs the scriptable HTTP destination as its own process until SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import click
import msgspec

from devstack.destination import TestDestination
from devstack.destination_script import Delivery, Reply

PROG = "python -m devstack.destination_cli"
_FAULT_HELP = (
    "A fault reply, repeatable: STATUS, drop or timeout, optionally followed by"
    " :key=value[,key=value] with keys retry_after and delay_s;"
    " e.g. 503, 429:retry_after=1, drop, timeout:delay_s=30 (timeout: a 200 after delay_s,"
    " 30 by default)."
)
_TIMEOUT_DELAY_S = 30.0
_LINES = msgspec.json.Encoder()


@dataclass(frozen=True)
class DestinationOptions:
    """Everything the command line sets."""

    host: str
    port: int
    id_field: str
    event_time_field: str
    fault_ratio: float
    faults: tuple[Reply, ...]
    reject_ids: tuple[str, ...]
    poison_field: str | None
    reject_status: int
    deliveries_file: Path | None
    seed: int


def parse_fault(spec: str) -> Reply:
    """Parse a --fault value such as `503`, `429:retry_after=1`, `drop` or `timeout:delay_s=30`."""
    kind, _, params = spec.partition(":")
    if kind not in ("drop", "timeout") and not kind.isdigit():
        raise ValueError(f"fault {spec!r}: {kind!r} is not a STATUS, drop or timeout")
    fields: dict[str, str] = {}
    for item in filter(None, params.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in ("retry_after", "delay_s"):
            raise ValueError(f"fault {spec!r}: {item!r} is not retry_after=... or delay_s=...")
        fields[key] = value
    default_delay_s = _TIMEOUT_DELAY_S if kind == "timeout" else 0.0
    try:
        delay_s = float(fields.get("delay_s", default_delay_s))
        if kind == "drop":
            return Reply(drop=True, delay_s=delay_s)
        status = 200 if kind == "timeout" else int(kind)
        return Reply(status=status, retry_after=fields.get("retry_after"), delay_s=delay_s)
    except ValueError as exc:
        raise ValueError(f"fault {spec!r}: {exc}") from exc


def _parse_faults(
    ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]
) -> tuple[Reply, ...]:
    try:
        return tuple(parse_fault(spec) for spec in specs)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="Port to listen on (0 picks a free one).",
)
@click.option("--id-field", default="id", show_default=True, help="Event field holding its id.")
@click.option(
    "--event-time-field",
    default="event_time",
    show_default=True,
    help="Event field copied into the deliveries file.",
)
@click.option(
    "--fault-ratio",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Fraction of requests answered with one of the --fault replies (seeded random).",
)
@click.option(
    "--fault", "faults", multiple=True, metavar="SPEC", callback=_parse_faults, help=_FAULT_HELP
)
@click.option(
    "--reject-id",
    "reject_ids",
    multiple=True,
    metavar="ID",
    help="Reject any request containing an event with this id; repeatable.",
)
@click.option(
    "--poison-field",
    metavar="FIELD",
    default=None,
    help="Reject any request containing an event whose FIELD is JSON true.",
)
@click.option(
    "--reject-status",
    type=click.IntRange(200, 599),
    default=400,
    show_default=True,
    help="Status answered to rejected requests.",
)
@click.option(
    "--deliveries-file",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Append one NDJSON line {id, received_ms, event_time} per delivered event.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the fault draw.")
def command(**flags: Any) -> None:
    """Serve a scriptable HTTP destination that accepts batches of JSON events.

    Prints `destination listening on URL` once ready and runs until SIGTERM or SIGINT.
    """
    options = DestinationOptions(**flags)  # one field per flag, of the same name
    if options.fault_ratio > 0 and not options.faults:
        raise click.UsageError("--fault-ratio > 0 needs at least one --fault")
    if options.faults and options.fault_ratio == 0:
        raise click.UsageError("--fault given but --fault-ratio is 0; add e.g. --fault-ratio 0.05")
    asyncio.run(serve(options))


class DeliveriesFile:
    """Appends one NDJSON line per delivered event, flushed per request."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._file: IO[bytes] | None = None

    def __enter__(self) -> DeliveriesFile:
        self._file = self._path.open("ab")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._file is not None:
            self._file.close()

    def __call__(self, deliveries: Sequence[Delivery]) -> None:
        if self._file is None:
            raise RuntimeError(f"deliveries file {self._path} is not open")
        self._file.write(_LINES.encode_lines(deliveries))  # {"id", "received_ms", "event_time"}
        self._file.flush()


async def serve(options: DestinationOptions) -> None:
    """Run the destination until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        with contextlib.ExitStack() as stack:
            path = options.deliveries_file
            sink = stack.enter_context(DeliveriesFile(path)) if path is not None else None
            destination = TestDestination(
                host=options.host,
                port=options.port,
                id_field=options.id_field,
                event_time_field=options.event_time_field,
                record_bodies=False,
                keep_history=False,
                on_delivery=sink,
            )
            async with destination:
                destination.reject_ids(options.reject_ids, options.reject_status)
                if options.poison_field is not None:
                    destination.reject_poison(options.poison_field, options.reject_status)
                destination.set_faults(options.fault_ratio, options.faults, seed=options.seed)
                print(f"destination listening on {destination.url}", flush=True)
                await stop.wait()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until a signal and return 0; on bad flags 2, on I/O errors 1, each with one line."""
    try:
        command.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.ClickException as exc:
        print(f"{PROG}: error: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
