"""A Kafka TLS listener for tests: Tansu (which serves no TLS itself) behind Debian's stunnel4,
with certificates from a throw-away `trustme` CA; mutual TLS and SASL on request."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, BinaryIO

import trustme

from devstack.broker import LocalBroker
from devstack.ports import free_port
from hifi.kafka.settings import KafkaSettings

_HOST = "127.0.0.1"
_POLL_S = 0.05


def stunnel_binary() -> str | None:
    """Path of stunnel (Debian names it stunnel4), None when it is not installed."""
    return shutil.which("stunnel4") or shutil.which("stunnel")


def stunnel_missing() -> str | None:
    """Why the TLS tests cannot run here (one line), None when they can."""
    if stunnel_binary() is None:
        return "stunnel is not installed: run `make stunnel` (Debian's stunnel4) for the Kafka TLS tests"
    return None


class TlsKafka:
    """A Tansu broker reached through a stunnel TLS port on loopback, stopped on exit.

    The broker advertises the stunnel port, so every connection a client makes after its
    bootstrap goes through TLS as well. `server_names` are the names the server certificate
    carries; with `mutual`, stunnel requires a client certificate signed by the CA
    (`client_cert_file`, `client_key_file`); `authentication` starts Tansu with SASL.
    """

    def __init__(
        self,
        directory: Path | None = None,
        *,
        mutual: bool = False,
        authentication: bool = False,
        server_names: tuple[str, ...] = ("localhost", _HOST),
        startup_timeout_s: float = 30.0,
    ) -> None:
        self.mutual = mutual
        self.authentication = authentication
        self._temporary: tempfile.TemporaryDirectory[str] | None = None
        if directory is None:  # removed on exit; a given directory keeps the logs
            self._temporary = tempfile.TemporaryDirectory(prefix="hifi-tls-")
            directory = Path(self._temporary.name)
        self.directory = directory
        self.ca = trustme.CA()
        self.ca_file = self.directory / "ca.pem"
        self.server_file = self.directory / "server.pem"
        self.client_cert_file = self.directory / "client.pem"
        self.client_key_file = self.directory / "client.key"
        self.config_file = self.directory / "stunnel.conf"
        self.log_path = self.directory / "stunnel.log"
        self.broker_log_path = self.directory / "tansu.log"
        self._server_names = server_names
        self._startup_timeout_s = startup_timeout_s
        self.port = 0
        self.broker: LocalBroker | None = None
        self._stunnel: subprocess.Popen[bytes] | None = None
        self._stunnel_output: BinaryIO | None = None

    @property
    def bootstrap(self) -> str:
        """The TLS address (stunnel's)."""
        return f"{_HOST}:{self.port}"

    @property
    def plain_bootstrap(self) -> str:
        """The broker's own plaintext address (it advertises the TLS one)."""
        assert self.broker is not None, "TlsKafka is not started"
        return self.broker.bootstrap

    def settings(self, **overrides: Any) -> KafkaSettings:
        """SSL settings for this listener (the CA; the client certificate when mutual), with
        `overrides` (any `KafkaSettings` field) applied and validated."""
        fields: dict[str, Any] = {
            "bootstrap": self.bootstrap,
            "security_protocol": "SSL",
            "ca_file": str(self.ca_file),
        }
        if self.mutual:
            fields["cert_file"] = str(self.client_cert_file)
            fields["key_file"] = str(self.client_key_file)
        return KafkaSettings(**{**fields, **overrides})

    def start(self) -> TlsKafka:
        binary = stunnel_binary()
        if binary is None:
            raise RuntimeError(stunnel_missing())
        self._write_certificates()
        try:
            self._start_both(binary)
        except BaseException:
            self.stop()
            raise
        return self

    def _write_certificates(self) -> None:
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        server = self.ca.issue_cert(*self._server_names)
        server.private_key_and_cert_chain_pem.write_to_path(str(self.server_file))
        client = self.ca.issue_cert("hifi-test-client")
        client.cert_chain_pems[0].write_to_path(str(self.client_cert_file))
        client.private_key_pem.write_to_path(str(self.client_key_file))

    def _start_both(self, binary: str, attempts: int = 3) -> None:
        """Tansu, then stunnel on another free port; a port taken meanwhile by someone else
        (another xdist worker) is a new attempt on new ports."""
        for attempt in range(1, attempts + 1):
            self.port = free_port()
            self.broker = LocalBroker(
                advertised_port=self.port,
                authentication=self.authentication,
                log_path=self.broker_log_path,
            ).start()
            self._write_config()
            self._stunnel_output = open(self.log_path, "ab")  # noqa: SIM115
            self._stunnel = subprocess.Popen(
                [binary, str(self.config_file)],
                stdout=self._stunnel_output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            try:
                self._until_accepting()
                return
            except RuntimeError:
                self.stop()
                if attempt == attempts:
                    raise

    def _write_config(self) -> None:
        assert self.broker is not None
        lines = [
            "foreground = yes",
            "pid =",
            "debug = notice",
            "[kafka]",
            f"accept = {_HOST}:{self.port}",
            f"connect = {self.broker.bootstrap}",
            f"cert = {self.server_file}",
        ]
        if self.mutual:
            lines += ["verify = 2", f"CAfile = {self.ca_file}"]
        self.config_file.write_text("\n".join(lines) + "\n")

    def _until_accepting(self) -> None:
        """Poll a TLS handshake with the test CA (and client certificate) until stunnel takes it."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.check_hostname = False
        if self.mutual:
            context.load_cert_chain(str(self.client_cert_file), str(self.client_key_file))
        deadline = time.monotonic() + self._startup_timeout_s
        while True:
            assert self._stunnel is not None
            if self._stunnel.poll() is not None:
                raise RuntimeError(
                    f"stunnel exited with {self._stunnel.returncode} on {self.bootstrap}:"
                    f" {self._log_tail()}"
                )
            try:
                with (
                    socket.create_connection((_HOST, self.port), timeout=1.0) as raw,
                    context.wrap_socket(raw),
                ):
                    return
            except (OSError, ssl.SSLError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"stunnel took no TLS handshake on {self.bootstrap} in"
                    f" {self._startup_timeout_s:g} s: {self._log_tail()}"
                )
            time.sleep(_POLL_S)

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-5:])
        except OSError:
            return "(no stunnel log)"

    def stop(self) -> None:
        if self._stunnel is not None:
            self._stunnel.terminate()
            try:
                self._stunnel.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._stunnel.kill()
                self._stunnel.wait()
            self._stunnel = None
        if self._stunnel_output is not None:
            self._stunnel_output.close()
            self._stunnel_output = None
        if self.broker is not None:
            self.broker.stop()
            self.broker = None

    def __enter__(self) -> TlsKafka:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
        if self._temporary is not None:
            self._temporary.cleanup()
