"""``python3 -m sglang_emulator.launch_router [launch] --pd-disaggregation ...``: the PD router stand-in.

Health-checks its workers the way sgl-model-gateway does (interval, timeout, failure and success
thresholds), serves ``/readiness``, ``/health_generate``, ``/workers`` and the proxied routes,
and exports ``smg_*`` metrics on its separate Prometheus listener.

With a leading ``launch`` it stands in for smg 1.13's ``smg launch`` rather than sglang-router
0.3.2: process title ``smg::router``, no ``--mini-lb``, the Prometheus listener on the unspecified
address of ``--host``'s family, smg's log lines (tracing format, ``model_gateway/src/server.rs``,
``observability/metrics_server.rs``, ``worker/worker.rs``) and its liveness and overload families
(``smg_worker_stalled{worker,reason}``, ``smg_worker_stall_transitions_total``,
``smg_workers_overloaded{model}``, ``smg_worker_overload_shed_total{stage}``,
``smg_pd_admission_{waits,sheds}_total``, ``smg_pd_{bootstrap,kv_transfer}_failures_total``), with
``smg_worker_health{worker}`` as ``observability/metrics.rs`` sets them (smg-project/smg, the
strings checked against the smg 1.13.0 wheel's ``smg_rs`` library).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

from . import logfmt
from .control import DEFAULT_CRASH_MESSAGE, control_path, read_control
from .exposition import Registry
from .flags import parse_router
from .launch_server import QuietHTTPServer, crash_text, serve
from .recall import tokenize
from .scheduler import CONTEXT_LEN

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(.*)$")


@dataclass
class Worker:
    url: str
    kind: str  # prefill | decode
    bootstrap_port: int | None = None
    healthy: bool = False
    checked: bool = False
    failures: int = 0
    successes: int = 0
    id: str = field(default_factory=lambda: str(uuid.uuid4()))  # the worker API's id (a UUID, as both routers)
    registered_at: float = field(default_factory=time.time)
    breaker_open: bool = False  # routing skips it; its health checks (is_healthy) go on as before


# ladder: states where the router holds the breakers of the workers registered before the state was set open
# (their engines answer; a fresh registration, or a router restart, closes them); "-locked": its worker API
# refuses, as a router with --control-plane-api-keys refuses a caller without the key (the strings of
# sglang-router 0.3.2's auth/middleware.rs: "Missing or invalid Authorization header for control plane API")
BREAKER_STATES = ("breaker-open", "breaker-open-locked")
CONTROL_PLANE_REFUSAL = "Missing or invalid Authorization header for control plane API"


def http(method: str, url: str, timeout: float, body: bytes | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (OSError, ValueError) as e:
        return 0, str(e).encode()


# smg 1.13 families beyond sglang-router 0.3.2's (observability/metrics.rs::init_metrics)
SMG_FAMILIES = [
    ("smg_worker_stalled", "gauge", "Liveness veto on a worker: 1 while routing skips it, by worker and reason"),
    ("smg_worker_stall_transitions_total", "counter", "Times the liveness veto was set on a worker, by worker and reason"),
    ("smg_workers_overloaded", "gauge", "Workers currently flagged overloaded and excluded from routing, by model"),
    ("smg_worker_overload_shed_total", "counter",
     "Requests shed because every worker for the model is overloaded, by stage (selection, dispatch)"),
    ("smg_pd_admission_waits_total", "counter", "PD dispatches that waited for a decode admission slot"),
    ("smg_pd_admission_sheds_total", "counter", "PD dispatches shed because no decode admission slot freed in time"),
    ("smg_pd_bootstrap_failures_total", "counter", "PD bootstrap injection failures"),
    ("smg_pd_kv_transfer_failures_total", "counter",
     "PD KV-transfer failures (missing connector params at decode handoff)"),
]
STALL_REASONS = ("unreachable", "wedged")  # the reasons smg exports a zero series for at registration


def smg_log(level: str, target: str, where: str, message: str) -> None:
    """One line in smg's stdout format: tracing fmt, ChronoUtc ``%Y-%m-%d %H:%M:%S``, file and line
    (model_gateway/src/observability/logging.rs)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    with logfmt._lock:
        sys.stdout.write(f"{stamp} {level:>5} {target}: {where}: {message}\n")
        sys.stdout.flush()


def set_process_title(title: str) -> None:
    """What smg's launcher does with setproctitle, as far as the kernel's comm goes (prctl PR_SET_NAME)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(15, title.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def router_registry(smg: bool = False) -> Registry:
    reg = Registry()
    for name, kind, help in [
        ("smg_worker_health", "gauge", "Worker health (1 healthy, 0 unhealthy)"),
        ("smg_worker_pool_size", "gauge", "Workers in the pool"),
        ("smg_worker_health_checks_total", "counter", "Worker health checks"),
        ("smg_worker_requests_active", "gauge", "Requests in flight per worker"),
        ("smg_worker_cb_state", "gauge", "Circuit breaker state per worker (0=closed, 1=open, 2=half_open)"),
        ("smg_http_requests_total", "counter", "HTTP requests"),
        ("smg_http_responses_total", "counter", "HTTP responses"),
        ("smg_router_requests_total", "counter", "Routed requests"),
        ("smg_router_request_errors_total", "counter", "Routing errors"),
    ] + (SMG_FAMILIES if smg else []):
        reg.family(name, kind, help)
    return reg


class Router:
    def __init__(self, args, control_file: str, smg: bool = False):
        self.args = args
        self.control_file = control_file
        self.smg = smg
        self.workers = [Worker(u, "prefill", p) for u, p in args.prefill] + [Worker(u, "decode") for u in args.decode]
        self.reg = router_registry(smg)
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=8)
        if smg:  # worker registration exports zero series (metrics.rs tests: protection-initialization)
            self.reg.set("smg_workers_overloaded", 0, {"model": "default"})
            for w in self.workers:
                for reason in STALL_REASONS:
                    self.reg.set("smg_worker_stalled", 0, {"worker": w.url, "reason": reason})
                    self.reg.inc("smg_worker_stall_transitions_total", 0, {"worker": w.url, "reason": reason})
            for stage in ("selection", "dispatch"):
                self.reg.inc("smg_worker_overload_shed_total", 0, {"stage": stage})
            for name in ("smg_pd_admission_waits_total", "smg_pd_admission_sheds_total",
                         "smg_pd_bootstrap_failures_total", "smg_pd_kv_transfer_failures_total"):
                self.reg.inc(name, 0)

    def _log_check(self, w: Worker, status: int, body: bytes, changed: bool) -> None:
        """Log as the router in use does: sglang-router a health transition, smg every failed check."""
        if not self.smg:
            if changed:
                verdict = "healthy" if w.healthy else f"unhealthy after {w.failures} failed health checks"
                logfmt.log(f"Worker {w.url} ({w.kind}) is {verdict}")
        elif status != 200:
            url = w.url + self.args.health_check_endpoint
            if status:
                smg_log("WARN", "smg::worker::worker", "model_gateway/src/worker/worker.rs:1760",
                        f"HTTP health check returned non-success status for {url}: {status}")
            else:
                smg_log("WARN", "smg::worker::worker", "model_gateway/src/worker/worker.rs:1768",
                        f"HTTP health check failed for {url}: {body.decode(errors='replace')}")

    def _liveness(self, w: Worker, status: int) -> None:
        """smg's liveness veto: no contact plus a transport failure marks the worker stalled (unreachable)."""
        stalled = status == 0
        labels = {"worker": w.url, "reason": "unreachable"}
        if stalled and not self.reg.get("smg_worker_stalled", labels):
            self.reg.inc("smg_worker_stall_transitions_total", 1, labels)
        self.reg.set("smg_worker_stalled", 1 if stalled else 0, labels)

    @property
    def state(self) -> str:
        return read_control(self.control_file).state

    def _breaker_since(self) -> float | None:
        """When a breaker state was set (the control file's time), or None outside one."""
        if self.state not in BREAKER_STATES:
            return None
        try:
            return os.stat(self.control_file).st_mtime
        except OSError:
            return None

    def check_once(self) -> None:
        forced_down = self.state == "no-healthy-workers"
        broken_before = self._breaker_since()
        timeout = self.args.health_check_timeout_secs
        with self.lock:
            workers = list(self.workers)
        answers = list(self.pool.map(
            lambda w: http("GET", w.url + self.args.health_check_endpoint, timeout), workers))
        with self.lock:
            for w, (status, body) in zip(workers, answers):
                if w not in self.workers:
                    continue  # removed through the worker API meanwhile
                w.breaker_open = broken_before is not None and w.registered_at < broken_before
                self.reg.set("smg_worker_cb_state", 1 if w.breaker_open else 0, {"worker": w.url})
                ok = status == 200 and not forced_down
                self.reg.inc("smg_worker_health_checks_total", 1,
                              {"worker_type": w.kind, "result": "success" if ok else "failure"})
                was = w.healthy
                if ok:
                    w.failures, w.successes = 0, w.successes + 1
                    w.healthy = w.healthy or not w.checked or w.successes >= self.args.health_success_threshold
                else:
                    w.successes, w.failures = 0, w.failures + 1
                    w.healthy = w.healthy and w.checked and not forced_down and (
                        w.failures < self.args.health_failure_threshold)
                w.checked = True
                self._log_check(w, status, body, w.healthy != was)
                if self.smg:
                    self._liveness(w, status)
                self.reg.set("smg_worker_health", 1 if w.healthy else 0,
                             {"worker": w.url} if self.smg else {"worker": w.url, "worker_type": w.kind})
            for kind in ("prefill", "decode"):
                self.reg.set("smg_worker_pool_size", sum(w.kind == kind for w in self.workers),
                             {"worker_type": kind, "connection_mode": "http", "model": "default"})

    def checker(self) -> None:
        while True:
            self.check_once()
            interval = 1 if self.state in ("no-healthy-workers", *BREAKER_STATES) else self.args.health_check_interval_secs
            time.sleep(interval)

    def healthy(self, kind: str) -> list[Worker]:
        """The workers routing may use: healthy, breaker not open."""
        with self.lock:
            return [w for w in self.workers if w.kind == kind and w.healthy and not w.breaker_open]

    def readiness(self) -> tuple[int, dict]:
        p, d = self.healthy("prefill"), self.healthy("decode")
        if p and d:
            return 200, {"status": "ready", "healthy_workers": len(p) + len(d), "total_workers": len(self.workers)}
        return 503, {"status": "not ready", "reason": "insufficient healthy workers"}

    def health_generate(self) -> tuple[int, str]:
        p, d = self.healthy("prefill"), self.healthy("decode")
        if not (p and d):
            return 503, f"No healthy worker pair available: {len(p)} healthy prefill, {len(d)} healthy decode"
        fp = self.pool.submit(http, "GET", p[0].url + "/health_generate", 30)
        fd = self.pool.submit(http, "GET", d[0].url + "/health_generate", 30)
        (ps, _), (ds, _) = fp.result(), fd.result()
        if ps != 200:
            return 503, f"Prefill {p[0].url} returned status {ps}"
        if ds != 200:
            return 503, f"Decode {d[0].url} returned status {ds}"
        return 200, "Health check passed"

    def tokenize(self, body: bytes) -> tuple[int, bytes]:
        """``/v1/tokenize``: SMG tokenizes in the router itself, with the model's tokenizer (the emulator's)."""
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return 400, json.dumps({"error": {"message": "invalid JSON body", "code": "validation_error"}}).encode()
        code, answer = tokenize(request if isinstance(request, dict) else {}, CONTEXT_LEN)
        return code, json.dumps(answer).encode()

    def route(self, path: str, body: bytes) -> tuple[int, bytes]:
        state = self.state
        end = time.monotonic() + self.args.request_timeout_secs
        while state == "slow" and time.monotonic() < end:  # holds the request past any client deadline
            time.sleep(0.2)
            state = self.state
        if state == "garbage":
            return 200, b"<html><body>upstream said: 42</body></html>"
        p, d = self.healthy("prefill"), self.healthy("decode")
        labels = {"router_type": "http", "backend_type": "pd", "connection_mode": "http", "model": "default",
                  "endpoint": path, "streaming": "false"}
        self.reg.inc("smg_router_requests_total", 1, labels)
        if not (p and d):
            self.reg.inc("smg_router_request_errors_total", 1, labels | {"error_type": "no_workers"})
            return 503, json.dumps({"error": {"message": "No available workers", "code": "no_workers"}}).encode()
        data = json.loads(body or b"{}")
        data |= {"bootstrap_host": urlparse(p[0].url).hostname, "bootstrap_port": p[0].bootstrap_port,
                 "bootstrap_room": int.from_bytes(os.urandom(7), "big")}
        raw = json.dumps(data).encode()
        timeout = self.args.request_timeout_secs
        fp = self.pool.submit(http, "POST", p[0].url + path, timeout, raw)
        status, out = http("POST", d[0].url + path, timeout, raw)
        fp.result()
        if status != 200:
            self.reg.inc("smg_router_request_errors_total", 1, labels | {"error_type": "backend_error"})
        return status or 502, out

    def engine_metrics(self) -> str:
        out = []
        for w in self.workers:
            status, body = http("GET", w.url + "/metrics", 5)
            if status != 200:
                continue
            for line in body.decode(errors="replace").splitlines():
                m = SAMPLE_RE.match(line)
                if line.startswith("#") or not m:
                    continue
                name, labels, value = m.group(1).replace(":", "_"), (m.group(2) or "{}")[1:-1], m.group(3)
                labels = f'{labels},worker_addr="{w.url}"' if labels else f'worker_addr="{w.url}"'
                out.append(f"{name}{{{labels}}} {value}")
        return "\n".join(out) + "\n"

    def proxy_get(self, path: str) -> tuple[int, bytes]:
        for w in self.healthy("prefill") + self.healthy("decode"):
            return http("GET", w.url + path, 10)
        return 503, json.dumps({"error": {"message": "No available workers", "code": "no_workers"}}).encode()

    def workers_json(self) -> dict:
        """``GET /workers`` as smg 1.13 / sglang-router 0.3.2 answer it (smg-project/smg model_gateway/src/worker/
        service.rs ``ListWorkersResult``; crates/protocols/src/worker.rs ``WorkerInfo``)."""
        with self.lock:
            workers = [{"id": w.id, "url": w.url, "model_id": "default", "worker_type": w.kind,
                        "connection_mode": "http", "is_healthy": w.healthy, "load": 0,
                        **({"bootstrap_port": w.bootstrap_port} if w.kind == "prefill" else {})} for w in self.workers]
            stats = {f"{k}_count": sum(w.kind == k for w in self.workers) for k in ("prefill", "decode", "regular")}
        return {"workers": workers, "total": len(workers), "stats": stats}

    def refused(self) -> tuple[int, dict] | None:
        """The worker API's refusal in a locked state (401, as without the control-plane key), else None."""
        if self.state == "breaker-open-locked":
            return 401, {"error": CONTROL_PLANE_REFUSAL, "code": "UNAUTHORIZED"}
        return None

    def add_worker(self, body: bytes) -> tuple[int, dict]:
        """``POST /workers``: 202 and the new id (the registration's health check runs in the background), 409 while
        the URL is registered (smg-project/smg model_gateway/src/worker/service.rs ``create_worker``)."""
        try:
            spec = json.loads(body or b"{}")
        except ValueError:
            spec = None
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str) or not spec["url"].startswith("http"):
            return 400, {"error": "Invalid worker spec: 'url' must be an http(s) URL", "code": "BAD_REQUEST"}
        kind = spec.get("worker_type", "regular")
        port = spec.get("bootstrap_port")
        with self.lock:
            known = next((w for w in self.workers if w.url == spec["url"]), None)
            if known is not None:
                return 409, {"error": f"Worker already exists at URL '{known.url}' with ID {known.id}. Use PUT "
                                      f"/workers/{known.id} to replace or PATCH /workers/{known.id} to update.",
                             "code": "WORKER_ALREADY_EXISTS"}
            worker = Worker(spec["url"], kind, port if isinstance(port, int) else None)
            self.workers.append(worker)
        self.pool.submit(self.check_once)  # the registration workflow's first health check
        location = f"/workers/{worker.id}"
        return 202, {"status": "accepted", "worker_id": worker.id, "url": worker.url, "location": location,
                     "message": "Worker addition queued for background processing"}

    def remove_worker(self, raw: str) -> tuple[int, dict]:
        """``DELETE /workers/{id}``: 202, 404 for an unknown id, 400 for one that is not a UUID (service.rs
        ``delete_worker``, ``parse_worker_id``); the removed worker's gauges read -1 (observability/metrics.rs
        ``remove_worker_metrics``)."""
        try:
            uuid.UUID(raw)
        except ValueError as e:
            return 400, {"error": f"Invalid worker_id '{raw}' (expected UUID). Error: {e}", "code": "BAD_REQUEST"}
        with self.lock:
            worker = next((w for w in self.workers if w.id == raw), None)
            if worker is None:
                return 404, {"error": f"Worker {raw} not found", "code": "WORKER_NOT_FOUND"}
            self.workers.remove(worker)
            for name in ("smg_worker_cb_state", "smg_worker_health"):
                self.reg.set(name, -1, {"worker": worker.url} if self.smg or name != "smg_worker_health"
                             else {"worker": worker.url, "worker_type": worker.kind})
        return 202, {"status": "accepted", "worker_id": raw, "message": "Worker removal queued for background processing"}


def api_handler(router: Router) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args) -> None:
            return

        def _send(self, code: int, body: bytes | str | dict, ctype: str = "application/json") -> None:
            data = json.dumps(body).encode() if isinstance(body, dict) else (
                body.encode() if isinstance(body, str) else body)
            self.send_response(code)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            router.reg.inc("smg_http_responses_total", 1, {"status_code": str(code), "error_code": ""})

        def _route(self) -> None:
            path = urlparse(self.path).path
            router.reg.inc("smg_http_requests_total", 1, {"method": self.command, "path": path})
            if path in ("/liveness", "/health"):
                return self._send(200, "OK", "text/plain")
            if path == "/readiness":
                return self._send(*router.readiness())
            if path == "/health_generate":
                code, text = router.health_generate()
                return self._send(code, text, "text/plain")
            if path == "/workers" and self.command == "GET":
                return self._send(200, router.workers_json())
            if path == "/workers" and self.command == "POST" or path.startswith("/workers/") and self.command == "DELETE":
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n)
                refusal = router.refused()
                if refusal is not None:
                    return self._send(*refusal)
                if self.command == "POST":
                    return self._send(*router.add_worker(body))
                return self._send(*router.remove_worker(path[len("/workers/"):]))
            if path == "/engine_metrics":
                return self._send(200, router.engine_metrics(), "text/plain; version=0.0.4")
            aliases = {"/get_model_info": "/model_info", "/get_server_info": "/server_info"}
            if path in ("/v1/models", "/model_info", "/server_info", *aliases):
                return self._send(*router.proxy_get(aliases.get(path, path)))
            if self.command == "POST" and path in ("/generate", "/v1/chat/completions", "/v1/completions"):
                n = int(self.headers.get("content-length") or 0)
                return self._send(*router.route(path, self.rfile.read(n)))
            if self.command == "POST" and path == "/v1/tokenize":
                n = int(self.headers.get("content-length") or 0)
                return self._send(*router.tokenize(self.rfile.read(n)))
            return self._send(404, {"error": {"message": f"no route for {path}", "code": "not_found"}})

        def do_GET(self) -> None:
            self._route()

        def do_POST(self) -> None:
            self._route()

        def do_DELETE(self) -> None:
            self._route()

    return Handler


def prometheus_handler(router: Router) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args) -> None:
            return

        def do_GET(self) -> None:
            data = router.reg.render().encode()
            self.send_response(200)
            self.send_header("content-type", "text/plain; version=0.0.4")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def listener(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> QuietHTTPServer:
    """An HTTP server on ``host`` of either address family (smg binds ``::`` for an IPv6 host)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("Listener", (QuietHTTPServer,), {"address_family": family})
    return server_class((host, port), handler)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    smg = bool(argv) and argv[0] == "launch"
    args = parse_router(argv[1:] if smg else argv, smg=smg)
    if smg:
        set_process_title("smg::router")  # smg/launch_router.py 1.13
    control_file = control_path()
    control = read_control(control_file)
    if control.state == "crash":
        logfmt.log(crash_text(control.message or DEFAULT_CRASH_MESSAGE))
        sys.exit(1)
    router = Router(args, control_file, smg=smg)
    serve(listener(args.prometheus_host, args.prometheus_port, prometheus_handler(router)))
    if smg:
        smg_log("INFO", "smg::observability::metrics_server", "model_gateway/src/observability/metrics_server.rs:56",
                f"Metrics server listening on {args.prometheus_host}:{args.prometheus_port} (/metrics)")
        smg_log("INFO", "smg::server", "model_gateway/src/server.rs:1262",
                f"Workers initialized: {len(router.workers)} total, 0 healthy")
        smg_log("INFO", "smg::server", "model_gateway/src/server.rs:1434", f"Starting server on {args.host}:{args.port}")
    else:
        logfmt.log(f"Starting router on {args.host}:{args.port} | mode: PD | policy: {args.policy} | "
                   f"prefill: {[u for u, _ in args.prefill]} | decode: {args.decode}")
    threading.Thread(target=router.checker, daemon=True).start()
    listener(args.host, args.port, api_handler(router)).serve_forever()


if __name__ == "__main__":
    main()
