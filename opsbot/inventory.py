"""The inventory: which clusters, nodes and roles opsbot manages, validated on load.

Names that end up in commands (unit names, node names) are checked against allow-lists here,
so nothing an operator types can reach a shell later.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from opsbot.yamlsource import ConfigError, ConfigProblem, load_model

RoleKind = Literal["prefill", "decode", "router"]
ROLE_KINDS: tuple[str, ...] = ("prefill", "decode", "router")

NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")  # always fullmatch: "$" would pass "decode\n"
UNIT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._:-]{0,200}\.service")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Node(_Strict):
    name: str
    address: str = Field(description="host name or IP the SSH connection goes to")
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    transport: Literal["ssh", "local"] = "ssh"
    key_file: Path | None = None
    host_key: str | None = Field(None, description="pinned public host key, 'ssh-ed25519 AAAA...'")
    known_hosts: Path | None = Field(None, description="known_hosts file holding this node's key")
    trust_on_first_use: bool = Field(
        False, description="accept an unknown key once and record it in known_hosts (needs known_hosts)"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.fullmatch(v):
            raise ValueError("node names are lower-case letters, digits and '-', e.g. 'gpu-node-1'")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", v):
            raise ValueError("not a valid Unix user name")
        return v

    @model_validator(mode="after")
    def _keys(self) -> Node:
        if self.transport == "local":
            return self
        if self.host_key is None and self.known_hosts is None:
            raise ValueError(
                "an SSH node needs its host key pinned: set host_key: 'ssh-ed25519 AAAA...' "
                "or known_hosts: /path/to/known_hosts (with trust_on_first_use: true to record it)"
            )
        if self.trust_on_first_use and self.known_hosts is None:
            raise ValueError("trust_on_first_use needs known_hosts: the file where the key is recorded")
        return self


class Role(_Strict):
    role: RoleKind
    name: str | None = Field(None, description="instance name, unique in the cluster; default: the role")
    node: str
    unit: str
    metrics_url: str | None = Field(None, description="as the node sees it, e.g. http://127.0.0.1:30000/metrics")
    health_url: str | None = Field(None, description="as the node sees it, e.g. http://127.0.0.1:30000/health")
    api_url: str | None = Field(
        None, description="router: the OpenAI-compatible base as the node sees it; default: health_url's origin"
    )
    http_via_ssh: bool = Field(True, description="reach the URLs through an SSH port forward from the node")
    gpus: list[int] = Field(default_factory=list)
    numa_node: int | None = None
    dp_size: int = Field(1, ge=1, le=256, description="DP-attention ranks (--enable-dp-attention --dp-size N); "
                         "above 1 the probe sends a canary pinned to each rank")
    bootstrap_port: int | None = Field(None, ge=1, le=65535, description="prefill: its --disaggregation-bootstrap-port "
                                       "(the fidelity probe pairs it with each decode)")
    # ladder: the router's admission limits, as its unit passes them (sglang_router 0.3.2 router_args.py:67-69,
    # smg 1.13.0 smg/router_args.py:144-146: max_concurrent_requests -1 = off, queue_size 100); a restart's cost
    # weighs the load it moves against them
    max_concurrent_requests: int | None = Field(None, description="router: its --max-concurrent-requests (-1: off)")
    queue_size: int | None = Field(None, ge=0, description="router: its --queue-size")

    @property
    def key(self) -> str:
        return self.name or self.role

    @field_validator("unit")
    @classmethod
    def _unit(cls, v: str) -> str:
        if not UNIT_RE.fullmatch(v):
            raise ValueError("unit must be a systemd service name such as 'sglang-decode.service'")
        return v

    @field_validator("name")
    @classmethod
    def _rname(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.fullmatch(v):
            raise ValueError("role names are lower-case letters, digits and '-'")
        return v

    @property
    def api_base(self) -> str | None:
        """Where ``/v1/completions`` lives for this role: ``api_url``, else the origin of ``health_url``."""
        url = self.api_url or self.health_url
        if url is None:
            return None
        scheme, _, rest = url.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}" if self.api_url is None else url.rstrip("/")

    @field_validator("metrics_url", "health_url", "api_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://[A-Za-z0-9.\-\[\]:]+(:\d+)?(/[\w./\-]*)?", v, re.ASCII):
            raise ValueError("write a plain http(s) URL such as http://127.0.0.1:30000/metrics")
        return v


class Cluster(_Strict):
    nodes: list[Node]
    roles: list[Role]
    canary: bool = Field(True, description="send one short completion through the router on every probe")
    model: str | None = Field(None, description="served model name for the canary and recall; default: the router's first")

    @model_validator(mode="after")
    def _refs(self) -> Cluster:
        names = [n.name for n in self.nodes]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"node names must be unique; repeated: {', '.join(sorted(dup))}")
        keys = [r.key for r in self.roles]
        dupr = {k for k in keys if keys.count(k) > 1}
        if dupr:
            raise ValueError(f"role names must be unique in a cluster; repeated: {', '.join(sorted(dupr))} (set name:)")
        for r in self.roles:
            if r.node not in names:
                raise ValueError(f"role {r.key!r} runs on node {r.node!r}, which is not in nodes ({', '.join(names)})")
        return self

    def router(self) -> Role | None:
        """The role requests go through: the first router with an API base."""
        return next((r for r in self.roles if r.role == "router" and r.api_base), None)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def select(self, wanted: list[str] | None) -> list[Role]:
        """Roles matching the names or kinds in ``wanted`` (all when empty); unknown names raise."""
        if not wanted:
            return list(self.roles)
        out: list[Role] = []
        for w in wanted:
            hit = [r for r in self.roles if w in (r.key, r.role)]
            if not hit:
                known = sorted({r.key for r in self.roles} | {r.role for r in self.roles})
                raise UnknownRole(w, known)
            out.extend(r for r in hit if r not in out)
        return out


class UnknownRole(KeyError):
    def __init__(self, name: str, known: list[str]):
        self.name, self.known = name, known
        super().__init__(f"unknown role {name!r}; this cluster has: {', '.join(known)}")

    def __str__(self) -> str:
        return self.args[0]


class Inventory(_Strict):
    clusters: dict[str, Cluster]

    @field_validator("clusters")
    @classmethod
    def _some(cls, v: dict[str, Cluster]) -> dict[str, Cluster]:
        if not v:
            raise ValueError("define at least one cluster")
        for name in v:
            if not NAME_RE.fullmatch(name):
                raise ValueError(f"cluster name {name!r}: use lower-case letters, digits and '-'")
        return v

    def cluster(self, name: str | None) -> tuple[str, Cluster]:
        """The named cluster, or the only one when ``name`` is None."""
        if name is None:
            if len(self.clusters) == 1:
                return next(iter(self.clusters.items()))
            raise ConfigError(
                [ConfigProblem("inventory", None, "", f"several clusters ({', '.join(self.clusters)}): pass --cluster")]
            )
        if name not in self.clusters:
            raise ConfigError(
                [ConfigProblem("inventory", None, "", f"no cluster {name!r}; known: {', '.join(self.clusters)}")]
            )
        return name, self.clusters[name]


def load_inventory(path: Path) -> Inventory:
    """Load and validate an inventory file, or raise ``ConfigError`` naming file and line."""
    return load_model(path, Inventory)
