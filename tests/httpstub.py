"""A tiny HTTP server on loopback for tests of the HTTP axes: every GET answers with a body.

``body_for`` returns the body (answered 200), or ``(status, headers, body)`` for anything else
(a redirect, a 503); ``hits`` lists the paths requested, so a test can say what was never fetched.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Answer = bytes | tuple[int, dict[str, str], bytes]


class Served(str):
    """The base URL, carrying the paths requested so far."""

    hits: list[str]


@contextmanager
def serve(body_for: Callable[[str], Answer]) -> Iterator[Served]:
    """Answer ``GET path`` with ``body_for(path)``; yields the base URL, stops on exit."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            answer = body_for(self.path)
            status, headers, body = (200, {}, answer) if isinstance(answer, bytes) else answer
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = Served(f"http://127.0.0.1:{server.server_address[1]}")
        url.hits = hits
        yield url
    finally:
        server.shutdown()
