"""What the network plugin tests share: network and IPAM plugins started for a test (each
network plugin naming its interfaces with a prefix of its own), the CLI, a free subnet, the
plugins' state, and the cleanup of a test's containers, networks and interfaces."""

from __future__ import annotations

import ipaddress
import json
import secrets
from typing import Any

import httpx

from tests.plugins.volume_helpers import cli, wait_for
from tests.support.daemon import Daemon, _free_subnet
from tests.support.plugins import ipam as ipam_impl
from tests.support.plugins import network as net_impl
from tests.support.plugins.process import PluginProcess

__all__ = ["cli", "wait_for"]


def api(d: Daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                        timeout=60)


def subnet() -> str:
    """A /24 no interface of this host uses."""
    return str(ipaddress.IPv4Interface(_free_subnet()).network)


def net_plugin(plugins: list[PluginProcess], d: Daemon, name: str, **args: str
               ) -> PluginProcess:
    """A started veth network plugin ``name`` in ``d``'s plugin directory, its interfaces
    named with a prefix of its own (``p.args["prefix"]``)."""
    p = PluginProcess(name, "network", socket_dir=d.plugin_dir,
                      args={"prefix": "t" + secrets.token_hex(2), **args})
    plugins.append(p)
    return p.start()


def ipam_plugin(plugins: list[PluginProcess], d: Daemon, name: str, *pools: str,
                **args: str) -> PluginProcess:
    p = PluginProcess(name, "ipam", socket_dir=d.plugin_dir,
                      args={"pools": ",".join(pools), **args})
    plugins.append(p)
    return p.start()


def methods(p: PluginProcess) -> list[str]:
    """The methods ``p`` was asked, in order, without their kind (``Join``)."""
    return [c["method"].split(".", 1)[1] for c in p.calls() if "." in c["method"]
            and not c["method"].startswith("Plugin.")]


def bodies(p: PluginProcess, method: str) -> list[dict[str, Any]]:
    kind = "IpamDriver" if p.impl == "ipam" else "NetworkDriver"
    return [c["body"] for c in p.calls(f"{kind}.{method}")]


def net_state(p: PluginProcess) -> dict[str, Any]:
    return net_impl.read_state(p.state)


def allocated(p: PluginProcess) -> dict[str, list[str]]:
    return ipam_impl.allocated(p.state)


def links(p: PluginProcess) -> list[str]:
    """The interfaces of this host that plugin ``p`` made and that still exist."""
    return net_impl.links(p.args["prefix"])


def inspect(host: str, ref: str) -> dict[str, Any]:
    return json.loads(cli(host, "inspect", ref))[0]  # type: ignore[no-any-return]


def record(d: Daemon, name: str) -> dict[str, Any]:
    """The daemon's durable record of network ``name``."""
    for path in (d.root / "store" / "networks").glob("*.json"):
        rec = json.loads(path.read_text())
        if rec.get("Name") == name:
            return rec  # type: ignore[no-any-return]
    raise AssertionError(f"no record of network {name}")


def clean_networks(d: Daemon, plugins: list[PluginProcess]) -> None:
    """The daemon's containers and user networks removed (while the plugins still run),
    then every interface the test's network plugins made."""
    try:
        with api(d) as c:
            for item in c.get("/containers/json", params={"all": "1"}).json():
                c.delete(f"/containers/{item['Id']}", params={"force": "1"})
            for n in c.get("/networks").json():
                if n["Name"] not in ("bridge", "host", "none"):
                    c.delete(f"/networks/{n['Id']}")
    finally:
        for p in plugins:
            if p.impl == "network":
                net_impl.remove_links(p.args["prefix"])
