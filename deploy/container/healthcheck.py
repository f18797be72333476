#!/usr/bin/env python3
"""The image's HEALTHCHECK (`hifi-healthcheck`): GET /readyz of the hifi daemon the container runs.

The daemon is the hifi command among the container's processes (PID 1 when the entrypoint
execs it, a child of an init such as `--init`'s otherwise). Its ops address is the one it
chose: its `--metrics-port` argument, else `HIFI_METRICS_PORT` in its environment, else its
default port (9400 connector, 9401 retrier, 9402 auditor, 9403 ingest); the host likewise from
`--metrics-host`/`HIFI_METRICS_HOST`, probed on loopback when it listens on every address.

Exit 0 when the daemon is ready, or when the container runs a one-shot command with no ops
port (`hifi-tenants`); 1 with one line when it is not ready, cannot be reached or is not found.
Only the standard library: it runs in the image's Python without importing hifi.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# each daemon's default --metrics-port
DEFAULT_PORTS = {"connector": 9400, "retrier": 9401, "auditor": 9402, "ingest": 9403}
TOOLS = ("hifi-tenants", "spark-batch")  # one-shot commands: no ops port to probe
PORT_ENV_VAR = "HIFI_METRICS_PORT"
HOST_ENV_VAR = "HIFI_METRICS_HOST"
TIMEOUT_S = 2.0
_BODY_BYTES = 400  # of /readyz's answer, shown in the healthcheck's line
_EVERY_ADDRESS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 (compared, not bound)


class Unhealthy(Exception):
    """The one line the healthcheck prints before exit 1."""


@dataclass(frozen=True, slots=True)
class Command:
    """A hifi command found among the container's processes."""

    name: str  # connector, retrier, auditor, ingest, hifi-tenants or spark-batch
    args: tuple[str, ...]  # its arguments after the command's name
    env: Mapping[str, str]  # its environment


def find_command(proc_dir: Path, own_pid: int) -> Command | None:
    """The hifi command with the lowest process id under `proc_dir` (`/proc`), other than ours."""
    pids = sorted(int(entry.name) for entry in proc_dir.iterdir() if entry.name.isdigit())
    for pid in pids:
        if pid == own_pid:
            continue
        try:
            argv = (proc_dir / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone since the listing, or not ours to read
            continue
        words = [os.fsdecode(word) for word in argv if word]
        # a console script runs as `PYTHON SCRIPT ARGS`, an exec'd binary as `SCRIPT ARGS`
        for index, word in enumerate(words[:2]):
            name = Path(word).name
            if name in DEFAULT_PORTS or name in TOOLS:
                env = _environment(proc_dir / str(pid) / "environ")
                return Command(name=name, args=tuple(words[index + 1 :]), env=env)
    return None


def _environment(path: Path) -> Mapping[str, str]:
    """A process's environment; our own when the file cannot be read (the container's is the same)."""
    try:
        entries = path.read_bytes().split(b"\0")
    except OSError:
        return dict(os.environ)
    pairs = (os.fsdecode(entry).partition("=") for entry in entries if b"=" in entry)
    return {name: value for name, _, value in pairs}


def _flag(args: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` (`--flag VALUE` or `--flag=VALUE`), as click takes it."""
    value = None
    for index, word in enumerate(args):
        if word == "--":
            break
        if word == flag and index + 1 < len(args):
            value = args[index + 1]
        elif word.startswith(flag + "="):
            value = word[len(flag) + 1 :]
    return value


def readyz_url(command: Command) -> str:
    """The `/readyz` URL of the daemon `command` runs, from its flags, environment and defaults."""
    port_text = _flag(command.args, "--metrics-port")
    source = "--metrics-port"
    if port_text is None and command.env.get(PORT_ENV_VAR):
        port_text, source = command.env[PORT_ENV_VAR], PORT_ENV_VAR
    port = DEFAULT_PORTS[command.name] if port_text is None else _port(port_text, source)
    host = _flag(command.args, "--metrics-host") or command.env.get(HOST_ENV_VAR, "127.0.0.1")
    host = _EVERY_ADDRESS.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/readyz"


def _port(text: str, source: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise Unhealthy(f"{source} {text!r} is not a port the healthcheck can probe (1-65535)")
    return int(text)


def probe(url: str, timeout_s: float = TIMEOUT_S) -> str:
    """GET `url`: its answer as one line when it is 200, else `Unhealthy` saying why."""
    try:
        # the URL is http://HOST:PORT/readyz, built above from the daemon's own settings
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            return _one_line(response.read(_BODY_BYTES))
    except urllib.error.HTTPError as exc:
        raise Unhealthy(f"{url}: {exc.code} {_one_line(exc.read(_BODY_BYTES))}") from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)  # refused, or no answer within timeout_s
        raise Unhealthy(f"{url}: no answer ({reason})") from exc


def _one_line(body: bytes) -> str:
    """`/readyz`'s answer (`ready` or `not ready`, then a line per part) as one line."""
    return "; ".join(line for line in body.decode(errors="replace").splitlines() if line)


def check(proc_dir: Path, own_pid: int) -> str:
    """What the healthcheck prints when healthy; `Unhealthy` otherwise."""
    command = find_command(proc_dir, own_pid)
    if command is None:
        known = ", ".join([*DEFAULT_PORTS, *TOOLS])
        raise Unhealthy(f"no hifi command ({known}) among the processes in {proc_dir}")
    if command.name in TOOLS:
        return f"{command.name}: a one-shot command, no ops port to probe"
    url = readyz_url(command)
    return f"{command.name} ready: {url} {probe(url)}"


def main() -> int:
    try:
        print(check(Path("/proc"), os.getpid()))
    except Unhealthy as exc:
        print(f"hifi-healthcheck: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
