"""What plugins are owed for gone endpoints: undone in libnetwork's order, a step without an
answer left owed (with what follows it), a refusal taken as the plugin's answer."""

from __future__ import annotations

from typing import Any

from svc.engine.networks.held import Held
from svc.engine.networks.ipam import EndpointInfo, Network
from svc.engine.networks.owed import Owed
from svc.network import bridge as br
from svc.plugins.client import PluginCallError, PluginCallNotFound, PluginTimeout


class FakePlugin:
    """A driver and an IPAM at once: records calls, raises what ``fail`` says."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.fail: dict[str, Exception] = {}

    async def call(self, method: str, body: Any, *, optional: bool = False,
                   wait: bool = True) -> dict[str, Any]:
        self.calls.append((method, body))
        exc = self.fail.get(method)
        if exc is not None:
            if optional and isinstance(exc, PluginCallError) and exc.status == 404:
                return {}
            raise exc
        return {}


class FakeDrivers:
    def __init__(self) -> None:
        self.plugin = FakePlugin()

    async def driver(self, name: str, *, wait: bool = True) -> FakePlugin:
        return self.plugin

    async def ipam(self, name: str, *, wait: bool = True) -> FakePlugin:
        return self.plugin


def setup() -> tuple[Owed, FakePlugin, Network, list[dict[str, Any]]]:
    drivers = FakeDrivers()
    net = Network("n1", "pn", "plug", subnet="10.0.0.0/24", ipam_driver="ipam")
    saved: list[dict[str, Any]] = []

    async def save(n: Network) -> None:
        saved.append(n.record())

    return Owed(drivers, lambda: [net], save), drivers.plugin, net, saved  # type: ignore[arg-type]


def full(cid: str) -> Held:
    return Held(cid, [("P", "10.0.0.5/24")], created=True, joined=True, external=True)


async def test_undone_in_libnetworks_order() -> None:
    owed, plugin, net, saved = setup()
    net.held["e1"] = full("c1")
    assert await owed.undo(net, "e1")
    assert [m for m, _ in plugin.calls] == [
        "RevokeExternalConnectivity", "Leave", "DeleteEndpoint", "ReleaseAddress"]
    assert plugin.calls[1][1] == {"NetworkID": "n1", "EndpointID": "e1"}
    assert plugin.calls[3][1] == {"PoolID": "P", "Address": "10.0.0.5"}
    assert net.held == {} and saved[-1]["Endpoints"] == {}


async def test_no_answer_leaves_the_rest_owed() -> None:
    owed, plugin, net, saved = setup()
    net.held["e1"] = full("c1")
    plugin.fail["Leave"] = PluginTimeout("plug", "NetworkDriver.Leave", 2)
    assert not await owed.undo(net, "e1")
    assert [m for m, _ in plugin.calls] == ["RevokeExternalConnectivity", "Leave"]
    left = net.held["e1"]
    assert (left.external, left.joined, left.created, left.addresses) == \
        (False, True, True, [("P", "10.0.0.5/24")])
    assert saved[-1]["Endpoints"]["e1"]["Joined"] is True  # durably: a crash resumes there
    del plugin.fail["Leave"]
    plugin.calls.clear()
    assert await owed.undo(net, "e1")
    assert [m for m, _ in plugin.calls] == ["Leave", "DeleteEndpoint", "ReleaseAddress"]


async def test_a_refusal_is_the_plugins_answer() -> None:
    owed, plugin, net, _ = setup()
    net.held["e1"] = full("c1")
    plugin.fail["DeleteEndpoint"] = PluginCallNotFound("NetworkDriver.DeleteEndpoint", 500,
                                                       "no such endpoint")
    plugin.fail["RevokeExternalConnectivity"] = PluginCallNotFound(
        "NetworkDriver.RevokeExternalConnectivity", 404, "404 page not found")
    assert await owed.undo(net, "e1")
    assert net.held == {}


async def test_settle_undoes_only_gone_endpoints_of_one_container() -> None:
    owed, plugin, net, _ = setup()
    net.held["gone1"] = Held("c1", created=True)
    net.held["gone2"] = Held("c2", created=True)
    net.held["live"] = Held("c1", created=True)
    net.endpoints["c1"] = EndpointInfo("/c1", "live", br.Endpoint("", "10.0.0.9", 24, "", ""))
    assert sorted(owed.owed(net)) == ["gone1", "gone2"]
    assert await owed.settle(net, "c1") == []
    assert sorted(net.held) == ["gone2", "live"]
    assert plugin.calls == [("DeleteEndpoint", {"NetworkID": "n1", "EndpointID": "gone1"})]
