"""A small HTTP/1.1 client connection: what the gates need, and no more.

``http.client`` parses every reply's headers with the ``email`` package: at a thousand
nodes (about 18 requests each) that parsing alone was several percent of the engine's
one CPU. This module speaks the same protocol with a plain header loop: one request at a
time per connection, bodies framed by ``Content-Length``, ``chunked`` transfer coding or
the connection's end, keep-alive unless either side says ``close`` (or HTTP/1.0 does not
say ``keep-alive``), and ``https`` through the standard ``ssl`` module with certificate
and host name checks. Replies are read incrementally, so server-sent events can be read
line by line as they arrive.
"""

from __future__ import annotations

import socket
import ssl

MAX_LINE = 65536
MAX_HEADERS = 200


class RemoteDisconnected(ConnectionResetError):
    """The server closed the connection before the reply's status line."""


class IncompleteRead(ConnectionResetError):
    """The connection ended inside a reply's body."""


class ProtocolError(ValueError):
    """The server's reply is not HTTP/1.x as this client reads it."""


class Response:
    def __init__(self, rfile, method: str):
        self._rfile = rfile
        while True:
            line = rfile.readline(MAX_LINE + 1)
            if not line:
                raise RemoteDisconnected("the server closed the connection without a reply")
            if len(line) > MAX_LINE:
                raise ProtocolError("status line too long")
            parts = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ProtocolError(f"not an HTTP/1.x status line: {line[:100]!r}")
            self.version, self.status = parts[0], int(parts[1])
            self.reason = parts[2] if len(parts) > 2 else ""
            self.headers = _headers(rfile)
            if not (100 <= self.status < 200) or self.status == 101:
                break               # an interim 1xx reply is followed by the real one
        conn = self.headers.get("connection", "").lower()
        self.will_close = "close" in conn or (self.version == "HTTP/1.0" and "keep-alive" not in conn)
        te = self.headers.get("transfer-encoding", "").lower()
        self._buf = b""
        self._left = 0              # bytes left in the body (length) or in this chunk (chunked)
        if method == "HEAD" or self.status in (204, 304) or 100 <= self.status < 200:
            self._mode = "done"
        elif "chunked" in te:
            self._mode = "chunked"
        elif "content-length" in self.headers:
            try:
                self._left = int(self.headers["content-length"])
            except ValueError:
                raise ProtocolError(f"bad Content-Length {self.headers['content-length']!r}") from None
            if self._left < 0:
                raise ProtocolError(f"bad Content-Length {self._left}")
            self._mode = "length" if self._left else "done"
        else:
            self._mode = "close"
            self.will_close = True

    def _next(self) -> bytes:
        """The next piece of the body; b"" at its end."""
        mode = self._mode
        if mode == "done":
            return b""
        if mode == "length":
            data = self._rfile.read1(min(self._left, 65536))
            if not data:
                raise IncompleteRead(f"the body ended {self._left} bytes short")
            self._left -= len(data)
            if not self._left:
                self._mode = "done"
            return data
        if mode == "chunked":
            if not self._left:
                line = self._rfile.readline(MAX_LINE + 1)
                if not line:
                    raise IncompleteRead("the connection ended before the next chunk")
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size line {line[:100]!r}") from None
                if size == 0:
                    _headers(self._rfile)         # trailers, up to the blank line
                    self._mode = "done"
                    return b""
                self._left = size
            data = self._rfile.read1(min(self._left, 65536))
            if not data:
                raise IncompleteRead("the connection ended inside a chunk")
            self._left -= len(data)
            if not self._left and self._rfile.readline(MAX_LINE + 1) not in (b"\r\n", b"\n"):
                raise ProtocolError("a chunk does not end with CRLF")
            return data
        data = self._rfile.read1(65536)           # until the server closes
        if not data:
            self._mode = "done"
        return data

    def read(self) -> bytes:
        parts = [self._buf]
        self._buf = b""
        while True:
            piece = self._next()
            if not piece:
                return b"".join(parts)
            parts.append(piece)

    def readline(self) -> bytes:
        while b"\n" not in self._buf:
            piece = self._next()
            if not piece:
                line, self._buf = self._buf, b""
                return line
            self._buf += piece
        i = self._buf.index(b"\n") + 1
        line, self._buf = self._buf[:i], self._buf[i:]
        return line

    @property
    def complete(self) -> bool:
        """The whole body was read (the connection can carry the next request)."""
        return self._mode == "done" and not self._buf


def _headers(rfile) -> dict[str, str]:
    out: dict[str, str] = {}
    for _ in range(MAX_HEADERS):
        line = rfile.readline(MAX_LINE + 1)
        if line in (b"\r\n", b"\n"):
            return out
        if not line:
            raise IncompleteRead("the connection ended inside the headers")
        if len(line) > MAX_LINE:
            raise ProtocolError("header line too long")
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep:
            raise ProtocolError(f"not a header line: {line[:100]!r}")
        name, value = name.strip().lower(), value.strip()
        out[name] = f"{out[name]}, {value}" if name in out else value
    raise ProtocolError(f"more than {MAX_HEADERS} header lines")


class Connection:
    def __init__(self, scheme: str, host: str, port: int, timeout: float, context: ssl.SSLContext | None = None):
        self.scheme, self.host, self.port, self.timeout = scheme, host, port, timeout
        self.context = context
        self.sock: socket.socket | None = None
        self._rfile = None
        default = 443 if scheme == "https" else 80
        name = f"[{host}]" if ":" in host else host
        self.host_header = name if port == default else f"{name}:{port}"

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.scheme == "https":
                ctx = self.context or ssl.create_default_context()
                sock = ctx.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise
        self.sock, self._rfile = sock, sock.makefile("rb")

    def settimeout(self, timeout: float) -> None:
        if self.sock is not None:
            self.sock.settimeout(timeout)

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> Response:
        if self.sock is None:
            self.connect()
        if any(c in path for c in " \r\n\t") or not path.startswith("/"):
            raise ProtocolError(f"not a request path: {path!r}")
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host_header}"]
        head += [f"{k}: {v}" for k, v in headers.items()]
        if body is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body or b'')}")
        assert self.sock is not None
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b""))
        return Response(self._rfile, method)

    def close(self) -> None:
        if self._rfile is not None:
            self._rfile.close()
            self._rfile = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
