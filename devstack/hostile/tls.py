"""The hostile destination's TLS listener: it requires a client certificate and refuses a client
without one the way servers do, with the TLS alert `certificate_required` on the wire.

asyncio's SSL transport drops a connection whose handshake failed without flushing that alert,
so this listener runs on blocking sockets in a thread of its own, where OpenSSL writes it.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading

import trustme

_HOST = "127.0.0.1"
_HANDSHAKE_S = 5.0
_LINGER_S = 2.0
_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


class ClientCertListener:
    """A TLS listener on loopback, certificate from a throw-away CA (`ca_pem`); a client with a
    certificate of that CA gets a 200, any other the alert. Counts both."""

    def __init__(self) -> None:
        self._ca = trustme.CA()
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._ca.issue_cert(_HOST, "localhost").configure_cert(self._context)
        self._ca.configure_trust(self._context)
        self._context.verify_mode = ssl.CERT_REQUIRED
        self._sock = socket.create_server((_HOST, 0))
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self.refused = 0  # handshakes refused (no or an unknown client certificate)
        self.answered = 0  # requests answered 200 after a handshake with a certificate
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="hostile-tls", daemon=True)

    @property
    def ca_pem(self) -> bytes:
        return bytes(self._ca.cert_pem.bytes())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(_HANDSHAKE_S)
        try:
            with self._context.wrap_socket(conn, server_side=True) as tls:
                tls.recv(65536)  # the request's head: the certificate was accepted
                tls.sendall(_OK)
                self.answered += 1
        except ssl.SSLError:
            self.refused += 1  # OpenSSL sent the alert before raising
            _linger(conn)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                conn.close()


def _linger(conn: socket.socket) -> None:
    """Close as servers do: stop sending, then read what the client still sends until it closes,
    so that its bytes arriving after a close cannot make the kernel reset the connection (which
    would discard the alert before the client reads it)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(_LINGER_S)
        while conn.recv(65536):
            pass
