"""The service under real uvicorn on a loopback port, in a thread of this process.

The hostile tests talk HTTP to it over a socket (raw bytes where they need to), so the server's
own parsing, limits and timeouts are in the path, as they are for an attacker.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from opsbot.service.app import create_app
from opsbot.flow import Flow
from opsbot.settings import Settings
from tests.databases import free_port


@contextmanager
def uvicorn_served(settings: Settings, flow: Flow) -> Iterator[str]:
    """Run the app (lifespan included) under uvicorn; yields its base URL; stops it on exit."""
    port = free_port()
    config = uvicorn.Config(create_app(settings, flow=flow), host="127.0.0.1", port=port, log_level="warning",
                            lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def raw_request(url: str, data: bytes, *, wait_s: float = 5.0) -> tuple[int | None, bytes]:
    """Send ``data`` as is over a fresh connection; (status, everything answered) or (None, b"")."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        sock.sendall(data)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except TimeoutError:
            pass
    if not answer.startswith(b"HTTP/1.1 "):
        return None, answer
    return int(answer[9:12]), answer
