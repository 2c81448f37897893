"""Transports: run an argv on a node, GET a URL as the node sees it, put a file there.

``SshTransport`` keeps one asyncssh connection per node with its host key verified against the
inventory (pinned key or known_hosts file; trust-on-first-use only when the node opts in).
``LocalTransport`` does the same for a bot that runs on the node itself. Both bound every
command by a deadline (enforced on the node with coreutils ``timeout`` and locally with
``asyncio.timeout``) and cap what they read. ``TransportPool`` hands out one transport per node
and bounds fan-out across all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import asyncssh
import httpx
from anyio import to_thread

from opsbot.inventory import Node
from opsbot.settings import Settings

STDERR_CAP = 16 * 1024
SESSIONS_PER_CONNECTION = 8  # below OpenSSH's MaxSessions default of 10


class HostKeyRefused(Exception):
    """The node's SSH host key is unknown or does not match what the inventory pins."""


@dataclass
class CommandResult:
    argv: list[str]
    exit_status: int | None
    stdout: str
    stderr: str
    elapsed_ms: float
    error: str | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_status == 0


@dataclass
class HttpResult:
    status: int | None
    body: str
    elapsed_ms: float
    error: str | None = None
    truncated: bool = False
    location: str | None = None  # a redirect's target, kept as evidence and never followed
    first_byte_ms: float | None = None  # when the first byte of the body arrived (a stream's first token)

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300


class Transport(Protocol):
    async def run(self, argv: Sequence[str], timeout: float, cap: int | None = None) -> CommandResult: ...

    async def http_get(
        self, url: str, timeout: float, cap: int | None = None, *, direct: bool = False
    ) -> HttpResult: ...

    async def http_post(
        self, url: str, body: bytes, timeout: float, cap: int | None = None, *, direct: bool = False
    ) -> HttpResult: ...

    async def http_delete(self, url: str, timeout: float, *, direct: bool = False) -> HttpResult: ...

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...


def _ms(since: float) -> float:
    return round((time.monotonic() - since) * 1000, 1)


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


async def _read_capped(stream, cap: int) -> tuple[bytes, bool]:
    """Read until EOF or ``cap`` bytes; True when the cap cut the output."""
    buf = bytearray()
    while True:
        chunk = await stream.read(65536)
        if not chunk:
            return bytes(buf), False
        room = cap - len(buf)
        if len(chunk) > room:
            buf += chunk[:room]
            return bytes(buf), True
        buf += chunk


def bounded_argv(argv: Sequence[str], timeout: float) -> list[str]:
    """Wrap ``argv`` in coreutils ``timeout`` so the node kills it even if our channel is gone."""
    secs = max(1, int(timeout + 0.999))
    return ["timeout", "--kill-after=1", str(secs), *argv]


def _timeout_error(argv: Sequence[str], timeout: float) -> str:
    return f"timed out after {timeout:g} s: {shlex.join(argv)[:200]}"


async def _http_get(
    client: httpx.AsyncClient, url: str, timeout: float, cap: int, deadline: float | None = None,
    body: bytes | None = None, method: str | None = None,
) -> HttpResult:
    """GET ``url`` (POST ``body`` as JSON when given; ``method`` another verb) reading at most ``cap`` bytes of
    body; never raises. ``deadline`` names the budget."""
    t0 = time.monotonic()
    deadline = deadline or timeout
    method = method or ("GET" if body is None else "POST")
    headers = {"content-type": "application/json"} if body is not None else None
    first: float | None = None
    try:
        async with asyncio.timeout(timeout):
            async with client.stream(method, url, timeout=timeout, content=body, headers=headers) as resp:
                buf = bytearray()
                truncated = False
                async for chunk in resp.aiter_bytes():
                    first = first if first is not None else _ms(t0)
                    buf += chunk
                    if len(buf) > cap:
                        del buf[cap:]
                        truncated = True
                        break
                return HttpResult(resp.status_code, _decode(bytes(buf)), _ms(t0), truncated=truncated,
                                  location=resp.headers.get("location") if resp.is_redirect else None,
                                  first_byte_ms=first)
    except TimeoutError:
        return HttpResult(None, "", _ms(t0), error=f"{method} {url}: no answer within {deadline:g} s",
                          first_byte_ms=first)
    except httpx.HTTPError as exc:
        return HttpResult(None, "", _ms(t0), error=f"{method} {url}: {type(exc).__name__}: {exc}".rstrip(": "))


def _http_client() -> httpx.AsyncClient:
    # trust_env=False: a proxy from the environment must not see node-local URLs.
    # follow_redirects=False: a role port answering 302 must not make opsbot fetch another URL from
    # its own host (request forgery outside the SSH tunnel); the redirect is evidence instead.
    return httpx.AsyncClient(trust_env=False, follow_redirects=False)


def _kill(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


async def _pipe(pipe: Any) -> tuple[asyncio.StreamReader, asyncio.BaseTransport]:
    """A child's output pipe read by the event loop (the child was started off it)."""
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader, transport


class LocalTransport:
    """Commands and HTTP on this machine: for a bot that runs on the node itself."""

    def __init__(self, node: Node, settings: Settings, client: httpx.AsyncClient | None = None):
        self.node = node
        self.settings = settings
        self._client = client or _http_client()  # the pool's: a client's TLS context is costly to build
        self._own_client = client is None

    async def run(self, argv: Sequence[str], timeout: float, cap: int | None = None) -> CommandResult:
        argv = list(argv)
        cap = cap or self.settings.output_cap_bytes
        t0 = time.monotonic()
        try:
            # started in a worker thread: uvloop forks the whole service on the event loop (tens of ms
            # per command at its size, every request in flight waiting); Popen uses vfork off the loop
            proc = await to_thread.run_sync(partial(
                subprocess.Popen, argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        except OSError as exc:
            return CommandResult(argv, None, "", "", _ms(t0), error=f"cannot start {argv[0]}: {exc.strerror or exc}")
        (stdout, out_pipe), (stderr, err_pipe) = await _pipe(proc.stdout), await _pipe(proc.stderr)
        try:
            async with asyncio.timeout(timeout):
                (out, truncated), (err, _) = await asyncio.gather(_read_capped(stdout, cap), _read_capped(stderr, STDERR_CAP))
                if truncated:
                    _kill(proc)
                status = await to_thread.run_sync(proc.wait, abandon_on_cancel=True)
        except TimeoutError:
            _kill(proc)
            await to_thread.run_sync(proc.wait)
            return CommandResult(argv, None, "", "", _ms(t0), error=_timeout_error(argv, timeout))
        finally:
            out_pipe.close()
            err_pipe.close()
        return CommandResult(
            argv, None if truncated else status, _decode(out), _decode(err), _ms(t0), truncated=truncated
        )

    async def http_get(self, url: str, timeout: float, cap: int | None = None, *, direct: bool = False) -> HttpResult:
        """GET ``url`` from here (on the node itself every request is direct)."""
        return await _http_get(self._client, url, timeout, cap or self.settings.output_cap_bytes)

    async def http_post(
        self, url: str, body: bytes, timeout: float, cap: int | None = None, *, direct: bool = False
    ) -> HttpResult:
        """POST a JSON ``body`` to ``url`` from here."""
        return await _http_get(self._client, url, timeout, cap or self.settings.output_cap_bytes, body=body)

    async def http_delete(self, url: str, timeout: float, *, direct: bool = False) -> HttpResult:
        """DELETE ``url`` from here (a router's worker API)."""
        return await _http_get(self._client, url, timeout, self.settings.output_cap_bytes, method="DELETE")

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        target = Path(path)
        tmp = target.with_name(f".{target.name}.opsbot-tmp")
        tmp.write_bytes(data)
        tmp.chmod(mode)
        os.replace(tmp, target)

    async def close(self) -> None:
        if self._own_client:
            await self._client.aclose()


def _known_hosts_line(node: Node, key: str) -> str:
    host = node.address if node.port == 22 else f"[{node.address}]:{node.port}"
    return f"{host} {key.strip()}"


def _has_entry(path: Path, node: Node) -> bool:
    if not path.exists():
        return False
    known = asyncssh.read_known_hosts(str(path))
    trusted, cas, revoked, *_ = known.match(node.address, node.address, node.port)
    return bool(trusted or cas or revoked)


async def trust_on_first_use(node: Node, settings: Settings) -> bool:
    """Record the node's key in its known_hosts file if it has no entry yet; True when recorded."""
    assert node.known_hosts is not None
    path = node.known_hosts.expanduser()
    if _has_entry(path, node):
        return False
    key = await asyncio.wait_for(
        asyncssh.get_server_host_key(node.address, node.port, config=None), settings.ssh_connect_timeout_s
    )
    if key is None:
        raise HostKeyRefused(f"node {node.name}: {node.address}:{node.port} offered no host key")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(_known_hosts_line(node, key.export_public_key().decode().strip()) + "\n")
    return True


def known_hosts_for(node: Node) -> asyncssh.SSHKnownHosts | str:
    """The trusted keys for ``node``: its pinned key, else its known_hosts file. Never None."""
    if node.host_key:
        try:
            return asyncssh.import_known_hosts(_known_hosts_line(node, node.host_key) + "\n")
        except (ValueError, asyncssh.KeyImportError) as exc:
            raise HostKeyRefused(f"node {node.name}: host_key in the inventory is not a public key: {exc}") from exc
    if node.known_hosts is None:
        raise HostKeyRefused(f"node {node.name}: no host_key or known_hosts in the inventory")
    path = node.known_hosts.expanduser()
    if not path.exists():
        raise HostKeyRefused(
            f"node {node.name}: known_hosts file {path} does not exist; create it (ssh-keyscan -p {node.port}"
            f" {node.address}) or set trust_on_first_use: true"
        )
    return str(path)


@dataclass
class _Forward:
    listener: asyncssh.SSHListener
    port: int


class SshTransport:
    """One verified asyncssh connection to a node, opened on first use and shared."""

    def __init__(self, node: Node, settings: Settings, client: httpx.AsyncClient | None = None):
        self.node = node
        self.settings = settings
        self._conn: asyncssh.SSHClientConnection | None = None
        self._error: str | None = None
        self._lock = asyncio.Lock()
        self._sessions = asyncio.Semaphore(SESSIONS_PER_CONNECTION)
        self._forwards: dict[tuple[str, int], _Forward] = {}
        self._client = client or _http_client()
        self._own_client = client is None
        self.recorded_key = False  # True once trust-on-first-use wrote this node's key

    async def connect(self) -> asyncssh.SSHClientConnection:
        """The shared connection; a failure is remembered so the rest of the probe fails fast."""
        async with self._lock:
            if self._conn is not None:
                if not self._conn.is_closed():
                    return self._conn
                self._conn, self._forwards = None, {}  # dropped (node rebooted?): open a new one
            if self._error is not None:
                raise ConnectionError(self._error)
            try:
                self._conn = await self._open()
            except HostKeyRefused as exc:
                self._error = str(exc)
                raise
            except Exception as exc:
                self._error = self._describe(exc)
                raise ConnectionError(self._error) from exc
            return self._conn

    def forget_failure(self) -> None:
        """A new probe tries a node that failed before (the failure is remembered only within a probe)."""
        self._error = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.is_closed()

    async def _open(self) -> asyncssh.SSHClientConnection:
        node, s = self.node, self.settings
        if node.trust_on_first_use and not node.host_key:
            self.recorded_key = await trust_on_first_use(node, s)
        try:
            return await asyncio.wait_for(
                asyncssh.connect(
                    node.address, port=node.port, username=node.user, known_hosts=known_hosts_for(node),
                    client_keys=[str(node.key_file.expanduser())] if node.key_file else (),
                    config=None, connect_timeout=s.ssh_connect_timeout_s, keepalive_interval=15,
                ),
                s.ssh_connect_timeout_s,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise HostKeyRefused(
                f"node {node.name}: host key of {node.address}:{node.port} is not the one the inventory trusts"
                f" ({exc.reason}); if the node was rebuilt on purpose, update its host_key/known_hosts"
            ) from exc

    def _describe(self, exc: BaseException) -> str:
        where = f"node {self.node.name} ({self.node.user}@{self.node.address}:{self.node.port})"
        if isinstance(exc, TimeoutError):
            return f"{where}: SSH connect timed out after {self.settings.ssh_connect_timeout_s:g} s"
        if isinstance(exc, asyncssh.PermissionDenied):
            return f"{where}: SSH authentication refused; check user and key_file"
        if isinstance(exc, OSError):
            return f"{where}: cannot connect: {exc.strerror or exc}"
        return f"{where}: {type(exc).__name__}: {exc}"

    async def run(self, argv: Sequence[str], timeout: float, cap: int | None = None) -> CommandResult:
        """Run ``argv`` on the node (each element quoted); never raises for a failed command."""
        argv = list(argv)
        cap = cap or self.settings.output_cap_bytes
        t0 = time.monotonic()
        try:
            conn = await self.connect()
        except (ConnectionError, HostKeyRefused) as exc:
            return CommandResult(argv, None, "", "", _ms(t0), error=str(exc))
        command = shlex.join(bounded_argv(argv, timeout))
        proc = None
        try:
            async with self._sessions:
                async with asyncio.timeout(timeout + 2):
                    proc = await conn.create_process(command, encoding=None, stdin=asyncssh.DEVNULL)
                    (out, truncated), (err, _) = await asyncio.gather(
                        _read_capped(proc.stdout, cap), _read_capped(proc.stderr, STDERR_CAP)
                    )
                    if truncated:
                        proc.close()
                        return CommandResult(argv, None, _decode(out), _decode(err), _ms(t0), truncated=True)
                    done = await proc.wait(check=False)
        except TimeoutError:
            if proc is not None:
                proc.close()
            return CommandResult(argv, None, "", "", _ms(t0), error=_timeout_error(argv, timeout))
        except (asyncssh.Error, OSError) as exc:
            return CommandResult(argv, None, "", "", _ms(t0), error=f"{self._describe(exc)} while running {argv[0]}")
        status = done.exit_status
        if status == 124:
            return CommandResult(argv, None, _decode(out), _decode(err), _ms(t0), error=_timeout_error(argv, timeout))
        return CommandResult(argv, status, _decode(out), _decode(err), _ms(t0))

    async def _forward(self, host: str, port: int) -> int:
        conn = await self.connect()
        async with self._lock:
            fwd = self._forwards.get((host, port))
            if fwd is None:
                listener = await conn.forward_local_port("127.0.0.1", 0, host, port)
                fwd = self._forwards[(host, port)] = _Forward(listener, listener.get_port())
            return fwd.port

    async def http_get(self, url: str, timeout: float, cap: int | None = None, *, direct: bool = False) -> HttpResult:
        """GET ``url`` as the node sees it: through an SSH local port forward unless ``direct``."""
        return await self._request(url, timeout, cap, direct, None)

    async def http_post(
        self, url: str, body: bytes, timeout: float, cap: int | None = None, *, direct: bool = False
    ) -> HttpResult:
        """POST a JSON ``body`` to ``url`` as the node sees it (through the same port forward)."""
        return await self._request(url, timeout, cap, direct, body)

    async def http_delete(self, url: str, timeout: float, *, direct: bool = False) -> HttpResult:
        """DELETE ``url`` as the node sees it (a router's worker API), through the same port forward."""
        return await self._request(url, timeout, None, direct, None, "DELETE")

    async def _request(self, url: str, timeout: float, cap: int | None, direct: bool, body: bytes | None,
                       method: str | None = None) -> HttpResult:
        cap = cap or self.settings.output_cap_bytes
        if direct:
            return await _http_get(self._client, url, timeout, cap, body=body, method=method)
        t0 = time.monotonic()
        parts = urlsplit(url)
        try:
            async with asyncio.timeout(timeout):
                local = await self._forward(parts.hostname or "127.0.0.1", parts.port or 80)
        except (ConnectionError, HostKeyRefused) as exc:
            return HttpResult(None, "", _ms(t0), error=str(exc))
        except TimeoutError:
            return HttpResult(None, "", _ms(t0), error=f"GET {url}: port forward not ready within {timeout:g} s")
        except (asyncssh.Error, OSError) as exc:
            return HttpResult(None, "", _ms(t0), error=f"GET {url}: port forward failed: {exc}")
        tunneled = urlunsplit((parts.scheme, f"127.0.0.1:{local}", parts.path, parts.query, ""))
        result = await _http_get(self._client, tunneled, timeout - (time.monotonic() - t0), cap, timeout, body, method)
        if result.error:
            result.error = result.error.replace(tunneled, f"{url} (via SSH to {self.node.name})")
        result.elapsed_ms = _ms(t0)
        return result

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``path`` on the node over SFTP, atomically (temp file, then rename)."""
        conn = await self.connect()
        tmp = f"{path}.opsbot-tmp"
        async with conn.start_sftp_client() as sftp:
            async with sftp.open(tmp, "wb") as fh:
                await fh.write(data)
            await sftp.chmod(tmp, mode)
            await sftp.posix_rename(tmp, path)

    async def close(self) -> None:
        for fwd in self._forwards.values():
            fwd.listener.close()
        self._forwards.clear()
        if self._conn is not None:
            self._conn.close()
            await self._conn.wait_closed()
            self._conn = None
        if self._own_client:
            await self._client.aclose()


@dataclass
class PooledTransport:
    """A transport whose commands and requests share the pool's fan-out limit."""

    inner: SshTransport | LocalTransport
    limit: asyncio.Semaphore
    node: Node = field(init=False)

    def __post_init__(self) -> None:
        self.node = self.inner.node

    async def run(self, argv: Sequence[str], timeout: float, cap: int | None = None) -> CommandResult:
        async with self.limit:
            return await self.inner.run(argv, timeout, cap)

    async def http_get(self, url: str, timeout: float, cap: int | None = None, *, direct: bool = False) -> HttpResult:
        async with self.limit:
            return await self.inner.http_get(url, timeout, cap, direct=direct)

    async def http_post(
        self, url: str, body: bytes, timeout: float, cap: int | None = None, *, direct: bool = False
    ) -> HttpResult:
        """Outside the fan-out limit: a long completion must not hold up the probe's commands."""
        return await self.inner.http_post(url, body, timeout, cap, direct=direct)

    async def http_delete(self, url: str, timeout: float, *, direct: bool = False) -> HttpResult:
        async with self.limit:
            return await self.inner.http_delete(url, timeout, direct=direct)

    async def put_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        async with self.limit:
            await self.inner.put_file(path, data, mode)

    async def connect(self) -> None:
        if isinstance(self.inner, SshTransport):
            await self.inner.connect()


class TransportPool:
    """One transport per node for the life of the pool, with bounded fan-out across all nodes."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._limit = asyncio.Semaphore(self.settings.max_fanout)
        self._transports: dict[str, PooledTransport] = {}
        self._client = _http_client()

    async def get(self, node: Node) -> PooledTransport:
        t = self._transports.get(node.name)
        if t is None:
            inner = (
                LocalTransport(node, self.settings, self._client)
                if node.transport == "local"
                else SshTransport(node, self.settings, self._client)
            )
            t = self._transports[node.name] = PooledTransport(inner, self._limit)
        return t

    async def close(self) -> None:
        for t in self._transports.values():
            await t.inner.close()
        self._transports.clear()
        await self._client.aclose()

    async def __aenter__(self) -> TransportPool:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
