"""The read-only HTTP server of the dataset pages (stdlib ``http.server``, one thread per request).

GET and HEAD only: every other method is answered 405 (nothing on the page changes data). Videos honour
a single byte ``Range`` (206), which a ``<video>`` element asks for to learn the length and seek. A server
listening on a loopback address answers only requests addressed to a loopback name (``Host``: localhost,
127.0.0.1, ::1), so a web page elsewhere cannot read the datasets through a name it points at 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vcollect.view.routes import Response, ViewApp

__all__ = ["ALLOWED_METHODS", "LOOPBACK_NAMES", "is_loopback", "make_server"]

#: The methods the server answers; any other gets 405.
ALLOWED_METHODS = ("GET", "HEAD")

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")

#: The Host names a loopback server answers.
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or name to listen on) is this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _host_name(header: str | None) -> str:
    """The name in a Host header, without its port or IPv6 brackets."""
    value = (header or "").strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _handler_class(app: ViewApp, *, loopback_only: bool) -> type[BaseHTTPRequestHandler]:
    """A request handler class answering from ``app`` (only loopback Host names when ``loopback_only``)."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "vcollect-view"
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer(head=False)

        def do_HEAD(self) -> None:  # noqa: N802
            self._answer(head=True)

        def _refuse(self) -> None:
            body = f"{self.command} not allowed: this page is read-only (GET, HEAD)\n".encode()
            self._send(Response(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", body,
                                {"Allow": ", ".join(ALLOWED_METHODS), "Connection": "close"}), head=False)
            self.close_connection = True

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _refuse  # noqa: N815

        def _answer(self, *, head: bool) -> None:
            name = _host_name(self.headers.get("Host"))
            if loopback_only and name not in LOOPBACK_NAMES and not is_loopback(name):
                self._send(Response(HTTPStatus.FORBIDDEN, "text/plain; charset=utf-8",
                                    b"this page answers requests addressed to localhost only\n"), head=head)
                return
            try:
                response = app.respond(self.path)
            except Exception as exc:  # noqa: BLE001 - one bad request must not stop the server
                response = Response(HTTPStatus.INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8",
                                    f"{type(exc).__name__}: {exc}\n".encode())
            self._send(response, head=head)

        def _send(self, response: Response, *, head: bool) -> None:
            body, status, headers = response.body, response.status, dict(response.headers)
            if response.content_type.startswith("video/"):
                headers["Accept-Ranges"] = "bytes"
                wanted = self.headers.get("Range")
                match = _RANGE.match(wanted.strip()) if wanted and status == HTTPStatus.OK else None
                if wanted and status == HTTPStatus.OK and match is None:
                    status, body = HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, b""
                    headers["Content-Range"] = f"bytes */{len(response.body)}"
                elif match is not None:
                    size = len(body)
                    first, last = match.groups()
                    if first == "":
                        start, end = max(0, size - int(last or 0)), size - 1
                    else:
                        start, end = int(first), min(size - 1, int(last)) if last else size - 1
                    if start >= size or start > end:
                        status, body = HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, b""
                        headers["Content-Range"] = f"bytes */{size}"
                    else:
                        status, body = HTTPStatus.PARTIAL_CONTENT, body[start : end + 1]
                        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            self.send_response(status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Content-Type-Options", "nosniff")
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            """Requests are not logged (the command prints where it serves, errors go to the page)."""

    return Handler


def make_server(app: ViewApp, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server of ``app``'s pages bound to ``host:port`` (port 0: a free one), not yet serving.

    Args:
        app: What it answers.
        host: The address to listen on (127.0.0.1: this machine only).
        port: The port.

    Returns:
        The server; ``serve_forever()`` runs it, ``server_address`` says where it listens.

    Raises:
        OSError: The address cannot be bound (a port in use: ``errno.EADDRINUSE``).
    """
    server = ThreadingHTTPServer((host, port), _handler_class(app, loopback_only=is_loopback(host)))
    server.daemon_threads = True
    return server
