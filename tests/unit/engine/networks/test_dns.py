"""The embedded DNS server's name lookup: names, aliases, short ids, and link aliases that
apply on their own network only."""

from __future__ import annotations

from svc.engine.networks.dns import lookup
from svc.engine.networks.ipam import EndpointInfo, Network
from svc.network.bridge import Endpoint


def _ep(name: str, address: str, links: list[str] | None = None,
        aliases: list[str] | None = None) -> EndpointInfo:
    return EndpointInfo(container=f"/{name}", endpoint_id="e",
                        endpoint=Endpoint(host_if="x", address=address, prefixlen=24,
                                          gateway="", mac=""),
                        aliases=list(aliases or []), attached=True, links=list(links or []))


def test_a_link_alias_applies_on_its_own_network_only() -> None:
    a, b = Network("a" * 64, "neta", "bridge"), Network("b" * 64, "netb", "bridge")
    me_a, me_b = _ep("me", "10.0.1.2", links=["db:web"]), _ep("me", "10.0.2.2")
    a.endpoints = {"1" * 64: me_a, "2" * 64: _ep("db", "10.0.1.3")}
    b.endpoints = {"1" * 64: me_b, "3" * 64: _ep("web", "10.0.2.4", aliases=["www"])}
    mine = [(a, me_a), (b, me_b)]
    # "web" is db on network a (the link), and the container called web on network b
    assert sorted(lookup(mine, "web") or []) == ["10.0.1.3", "10.0.2.4"]
    assert lookup(mine, "www") == ["10.0.2.4"]
    assert lookup(mine, "3" * 12) == ["10.0.2.4"]
    assert lookup(mine, "nope") is None
