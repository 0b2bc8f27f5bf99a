"""What svc keeps of a network's plugins: the pools a plugin IPAM handed out (``PoolInfo``),
and per endpoint what a plugin may hold for it (``Held``), written into the network's record
before each call that creates something, so that a daemon killed at any moment knows what to
undo at its next start. ``Plugged`` is a live endpoint's part that only memory needs."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from svc.engine.networks.remote_api import JoinAnswer


@dataclass
class PoolInfo:
    """A pool of a plugin IPAM: its id, the pool (CIDR), its gateway (CIDR; "" if none) and
    the auxiliary addresses reserved in it (name -> CIDR)."""

    pool_id: str
    pool: str
    gateway: str = ""
    data: dict[str, str] = field(default_factory=dict)
    aux: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"PoolID": self.pool_id, "Pool": self.pool, "Gateway": self.gateway,
                "Data": self.data, "Aux": self.aux}

    @classmethod
    def from_record(cls, r: dict[str, Any] | None) -> PoolInfo | None:
        if not r:
            return None
        return cls(str(r["PoolID"]), str(r["Pool"]), str(r.get("Gateway") or ""),
                   dict(r.get("Data") or {}), dict(r.get("Aux") or {}))

    @property
    def gateway_ip(self) -> str:
        return self.gateway.split("/")[0] if self.gateway else ""

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.pool).prefixlen


@dataclass
class Held:
    """What the plugins may hold for one endpoint (by endpoint id in the network's record).

    ``addresses`` are (pool id, address) pairs a plugin IPAM gave (each owes a
    ``ReleaseAddress``); ``reserved`` the built-in IPAM's addresses, kept from other
    containers until the entry goes (the driver may still use them); ``created``,
    ``joined`` and ``external`` say that ``CreateEndpoint``, ``Join`` and
    ``ProgramExternalConnectivity`` may have been sent (each owes its undoing).
    An entry goes once all of it has been undone.
    """

    container: str
    addresses: list[tuple[str, str]] = field(default_factory=list)
    created: bool = False
    joined: bool = False
    external: bool = False
    reserved: list[str] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {"Container": self.container, "Addresses": [list(a) for a in self.addresses],
                "Created": self.created, "Joined": self.joined, "External": self.external,
                "Reserved": self.reserved}

    @classmethod
    def from_record(cls, r: dict[str, Any]) -> Held:
        return cls(str(r.get("Container") or ""),
                   [(str(p), str(a)) for p, a in r.get("Addresses") or []],
                   bool(r.get("Created")), bool(r.get("Joined")), bool(r.get("External")),
                   [str(a) for a in r.get("Reserved") or []])

    @property
    def done(self) -> bool:
        return not (self.addresses or self.created or self.joined or self.external
                    or self.reserved)


@dataclass
class Plugged:
    """A live endpoint's plugin side: its record, the options its calls carry, the Join's
    answer and the interface in the container."""

    held: Held
    options: dict[str, Any] = field(default_factory=dict)  # the sandbox's labels (ports)
    joined: JoinAnswer | None = None
    ifname: str = ""  # the moved interface's name in the container ("" if none)
