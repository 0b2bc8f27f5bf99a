"""A container's settings on one network, as create's NetworkingConfig or a connect gave
them: the typed record the containers and networks services share.

Stored inside the container's record in the API's spelling (``IPAMConfig``, ``Aliases``,
``Links``), so records of earlier versions read back unchanged; ``Disconnected`` marks the
container's NetworkMode network after a disconnect (it stays the primary, unjoined).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, replace
from typing import Any

from svc.errors import InvalidParameter
from svc.models.containers import EndpointConfigBody


@dataclass(frozen=True)
class EndpointPlan:
    ipv4: str = ""  # a static address asked for (IPAMConfig.IPv4Address)
    ipv6: str = ""
    aliases: tuple[str, ...] = ()
    links: tuple[str, ...] = ()  # <container>[:<alias>] names only this container resolves
    disconnected: bool = False

    @classmethod
    def from_body(cls, body: EndpointConfigBody | None) -> EndpointPlan:
        """Checked: the static addresses must be addresses (400 naming them)."""
        if body is None:
            return cls()
        ipam = body.IPAMConfig
        v4, v6 = (ipam.IPv4Address, ipam.IPv6Address) if ipam is not None else ("", "")
        try:
            if v4:
                ipaddress.IPv4Address(v4)
            if v6:
                ipaddress.IPv6Address(v6)
        except ValueError:
            raise InvalidParameter(f"invalid IPv4Address {v4!r} or IPv6Address {v6!r}") \
                from None
        return cls(ipv4=v4, ipv6=v6, aliases=tuple(body.Aliases or ()),
                   links=tuple(body.Links or ()))

    def with_links(self, links: list[str]) -> EndpointPlan:
        return replace(self, links=tuple(dict.fromkeys([*self.links, *links])))

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.disconnected:
            out["Disconnected"] = True
        if self.ipv4 or self.ipv6:
            out["IPAMConfig"] = {k: v for k, v in (("IPv4Address", self.ipv4),
                                                   ("IPv6Address", self.ipv6)) if v}
        if self.aliases:
            out["Aliases"] = list(self.aliases)
        if self.links:
            out["Links"] = list(self.links)
        return out

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> EndpointPlan:
        ipam = rec.get("IPAMConfig") or {}
        return cls(ipv4=str(ipam.get("IPv4Address") or ""),
                   ipv6=str(ipam.get("IPv6Address") or ""),
                   aliases=tuple(str(a) for a in rec.get("Aliases") or ()),
                   links=tuple(str(x) for x in rec.get("Links") or ()),
                   disconnected=bool(rec.get("Disconnected")))

    def ipam_body(self) -> dict[str, str] | None:
        """IPAMConfig as inspect shows it (null when no static address was asked for)."""
        return self.record().get("IPAMConfig")
