"""An HTTP egress proxy for tests and benches: Debian's tinyproxy on a loopback port, with Basic
auth and a CONNECT port list on request; the requests it served read from its log."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from devstack.ports import answers, free_port

_HOST = "127.0.0.1"
_POLL_S = 0.02
_REQUEST = re.compile(r"Request \(file descriptor \d+\): (.+)$")


def tinyproxy_missing() -> str | None:
    """Why the proxy tests cannot run here (one line), None when they can."""
    if shutil.which("tinyproxy") is None:
        return "tinyproxy is not installed: run `make tinyproxy` (Debian's tinyproxy) for the proxy tests"
    return None


class TinyProxy:
    """A tinyproxy of our own on a free loopback port, accepting clients from loopback only.

    `auth` (user, password): it answers 407 to a request without them (tinyproxy 1.11 answers
    401 to wrong ones). `connect_ports`: the only ports it opens a CONNECT tunnel to (empty: any).
    Use as a context manager (`with TinyProxy() as proxy:`), or `start()` and `stop()`.
    """

    def __init__(
        self,
        *,
        auth: tuple[str, str] | None = None,
        connect_ports: tuple[int, ...] = (),
        startup_timeout_s: float = 10.0,
    ) -> None:
        binary = shutil.which("tinyproxy")
        if binary is None:
            raise RuntimeError(tinyproxy_missing())
        self._binary = binary
        self.auth = auth
        self.connect_ports = connect_ports
        self._startup_timeout_s = startup_timeout_s
        self._directory = tempfile.TemporaryDirectory(prefix="hifi-tinyproxy-")
        self.config_file = Path(self._directory.name) / "tinyproxy.conf"
        self.log_path = Path(self._directory.name) / "tinyproxy.log"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, *, user: str | None = None, password: str | None = None) -> str:
        """`http://127.0.0.1:PORT`, with `user:password@` (default: the proxy's own) if it has auth."""
        if self.auth is None and user is None:
            return f"http://{_HOST}:{self.port}"
        name = user if user is not None else self.auth[0] if self.auth else ""
        secret = password if password is not None else self.auth[1] if self.auth else ""
        return f"http://{name}:{secret}@{_HOST}:{self.port}"

    def requests(self) -> list[str]:
        """The request lines it has read so far, in order: "CONNECT 127.0.0.1:8443 HTTP/1.1",
        "POST http://127.0.0.1:8000/token HTTP/1.1"."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []
        return [match.group(1) for line in lines if (match := _REQUEST.search(line))]

    def start(self, attempts: int = 3) -> TinyProxy:
        """Start it and wait until it accepts connections; a port taken meanwhile by someone else
        (another xdist worker) is another attempt on another port."""
        for attempt in range(1, attempts + 1):
            self.port = free_port()
            self._write_config()
            self._process = subprocess.Popen(
                [self._binary, "-d", "-c", str(self.config_file)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
            try:
                self._until_accepting()
                return self
            except RuntimeError:
                self.stop()
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _write_config(self) -> None:
        lines = [
            f"Port {self.port}",
            f"Listen {_HOST}",
            "Timeout 60",
            "MaxClients 200",
            f'LogFile "{self.log_path}"',
            "LogLevel Connect",  # one line per connection and per request line read
            f"Allow {_HOST}",
            "DisableViaHeader Yes",
        ]
        if self.auth is not None:
            lines.append(f"BasicAuth {self.auth[0]} {self.auth[1]}")
        lines += [f"ConnectPort {port}" for port in self.connect_ports]
        self.config_file.write_text("\n".join(lines) + "\n")

    def _until_accepting(self) -> None:
        deadline = time.monotonic() + self._startup_timeout_s
        while not answers(_HOST, self.port, timeout_s=0.5):
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"tinyproxy exited with {self._process.returncode} on port {self.port}:"
                    f" {self._log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"tinyproxy did not listen on port {self.port} in"
                    f" {self._startup_timeout_s:g} s: {self._log_tail()}"
                )
            time.sleep(_POLL_S)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-3:])
        except OSError:
            return "(no tinyproxy log)"

    def stop(self) -> None:
        """Stop it (SIGTERM, SIGKILL after 10 s) and wait until it is gone."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> TinyProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        self._directory.cleanup()
