"""A network plugin that does what a plugin written for Docker 1.11 does: a Linux bridge per
network (holding the gateway address the IPAM gave), a veth pair per joined endpoint with its
host end on that bridge and the other end handed to the daemon (``SrcName``, ``DstPrefix``
``eth``). Every interface it makes is named ``<prefix>...`` (``--arg prefix=``, at most 5
characters), so that a test removes whatever it left with ``remove_links(prefix)``.

State (networks, endpoints, the nodes it was told of, counters) is kept in
``<state>/network.json``, written atomically at each change: a restarted plugin process keeps
it, and a test reads it with ``read_state``.

The network's ``-o`` options (``com.docker.network.generic``) shape its answers:

- ``route=<cidr>``: a static route through the gateway (RouteType 0); ``connected=<cidr>``:
  a connected route (RouteType 1);
- ``gateway=none``: Join gives no gateway; ``mac=driver``: CreateEndpoint supplies a MAC when
  the daemon gave none; ``change-address=1``: CreateEndpoint answers another address (a
  driver that changes what it was given); ``no-interface=<SrcName>``: Join names an interface
  that does not exist.

``--arg scope=global`` makes GetCapabilities answer that scope. Refusals answer 500 with
``Err`` (``--arg err-status=200``: 200).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import threading
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

IMPLEMENTS = ["NetworkDriver"]
GENERIC = "com.docker.network.generic"


def read_state(state: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((state / "network.json").read_text()))
    except FileNotFoundError:
        return {"networks": {}, "endpoints": {}, "nodes": [], "next": 0}


def remove_links(prefix: str) -> list[str]:
    """Delete every link of this host whose name starts with ``prefix``; their names."""
    gone = []
    with IPRoute() as ip:
        for link in ip.get_links():
            name = str(link.get_attr("IFLA_IFNAME"))
            if name.startswith(prefix):
                with contextlib.suppress(NetlinkError):
                    ip.link("del", index=link["index"])
                    gone.append(name)
    return gone


def links(prefix: str) -> list[str]:
    with IPRoute() as ip:
        return sorted(str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links()
                      if str(link.get_attr("IFLA_IFNAME")).startswith(prefix))


def make(state: Path, args: dict[str, str]) -> dict[str, Any]:
    lock = threading.Lock()
    prefix = args.get("prefix", "tnp")[:5]
    err_status = int(args.get("err-status", "500"))

    def save(doc: dict[str, Any]) -> None:
        tmp = state / "network.json.tmp"
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, state / "network.json")

    def refuse(words: str) -> tuple[int, Any]:
        return err_status, {"Err": words}

    def capabilities(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"Scope": args.get("scope", "local")}

    def create_network(body: dict[str, Any]) -> tuple[int, Any]:
        opts = (body.get("Options") or {}).get(GENERIC) or {}
        if "refuse" in opts:
            return refuse(opts["refuse"])
        v4 = (body.get("IPv4Data") or [{}])[0]
        with lock:
            doc = read_state(state)
            n = doc["next"] = doc["next"] + 1
            bridge = f"{prefix}b{n}"
            with IPRoute() as ip:
                ip.link("add", ifname=bridge, kind="bridge")
                idx = ip.link_lookup(ifname=bridge)[0]
                if v4.get("Gateway"):
                    gw = ipaddress.ip_interface(v4["Gateway"])
                    ip.addr("add", index=idx, address=str(gw.ip), prefixlen=gw.network.prefixlen)
                ip.link("set", index=idx, state="up")
            doc["networks"][body["NetworkID"]] = {"bridge": bridge, "options": opts,
                                                  "ipv4": v4, "body": body}
            save(doc)
        return 200, {}

    def delete_network(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            net = doc["networks"].pop(body["NetworkID"], None)
            if net is None:
                return refuse(f"no such network {body['NetworkID']}")
            _delete(net["bridge"])
            save(doc)
        return 200, {}

    def create_endpoint(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            net = doc["networks"].get(body["NetworkID"])
            if net is None:
                return refuse(f"no such network {body['NetworkID']}")
            iface = body.get("Interface") or {}
            doc["endpoints"][body["EndpointID"]] = {"network": body["NetworkID"],
                                                    "interface": iface, "joined": False}
            save(doc)
        answer: dict[str, Any] = {}
        opts = net["options"]
        if opts.get("mac") == "driver" and not iface.get("MacAddress"):
            answer["MacAddress"] = "02:00:5e:10:00:" + f"{doc['next'] % 256:02x}"
        if opts.get("change-address") and iface.get("Address"):
            answer["Address"] = "192.0.2.77/24"
        return 200, {"Interface": answer or None}

    def oper_info(body: dict[str, Any]) -> tuple[int, Any]:
        ep = read_state(state)["endpoints"].get(body["EndpointID"])
        if ep is None:
            return refuse(f"no such endpoint {body['EndpointID']}")
        return 200, {"Value": {"plugin": "test"}}

    def delete_endpoint(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            ep = doc["endpoints"].pop(body["EndpointID"], None)
            if ep is None:
                return refuse(f"no such endpoint {body['EndpointID']}")
            if ep.get("host"):
                _delete(ep["host"])
            save(doc)
        return 200, {}

    def join(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            ep = doc["endpoints"].get(body["EndpointID"])
            if ep is None:
                return refuse(f"no such endpoint {body['EndpointID']}")
            net = doc["networks"][ep["network"]]
            opts = net["options"]
            if "refuse-join" in opts:
                return refuse(opts["refuse-join"])
            n = doc["next"] = doc["next"] + 1
            host, peer = f"{prefix}h{n}", f"{prefix}c{n}"
            with IPRoute() as ip:
                br = ip.link_lookup(ifname=net["bridge"])[0]
                ip.link("add", ifname=host, kind="veth", peer=peer)
                idx = ip.link_lookup(ifname=host)[0]
                ip.link("set", index=idx, master=br, state="up")
            ep.update(joined=True, host=host, peer=peer, sandbox=body.get("SandboxKey"),
                      options=body.get("Options"))
            save(doc)
        gw = net["ipv4"].get("Gateway", "").split("/")[0]
        answer: dict[str, Any] = {"InterfaceName": {
            "SrcName": opts.get("no-interface") or peer, "DstPrefix": "eth"}}
        if opts.get("gateway") != "none" and gw:
            answer["Gateway"] = gw
        routes = []
        if opts.get("route"):
            routes.append({"Destination": opts["route"], "RouteType": 0, "NextHop": gw})
        if opts.get("connected"):
            routes.append({"Destination": opts["connected"], "RouteType": 1})
        if routes:
            answer["StaticRoutes"] = routes
        return 200, answer

    def leave(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            ep = doc["endpoints"].get(body["EndpointID"])
            if ep is None or not ep.get("joined"):
                return refuse(f"no such endpoint {body['EndpointID']} joined")
            ep["joined"] = False
            if ep.get("host"):
                _delete(ep.pop("host"))
            save(doc)
        return 200, {}

    def external(what: str) -> Any:
        def fn(body: dict[str, Any]) -> tuple[int, Any]:
            with lock:
                doc = read_state(state)
                ep = doc["endpoints"].get(body["EndpointID"])
                if ep is not None:
                    ep[what] = ep.get(what, 0) + 1
                    save(doc)
            return 200, {}
        return fn

    def discover(added: bool) -> Any:
        def fn(body: dict[str, Any]) -> tuple[int, Any]:
            with lock:
                doc = read_state(state)
                doc["nodes"].append([added, body])
                save(doc)
            return 200, {}
        return fn

    out = {"NetworkDriver.GetCapabilities": capabilities,
           "NetworkDriver.CreateNetwork": create_network,
           "NetworkDriver.DeleteNetwork": delete_network,
           "NetworkDriver.CreateEndpoint": create_endpoint,
           "NetworkDriver.EndpointOperInfo": oper_info,
           "NetworkDriver.DeleteEndpoint": delete_endpoint,
           "NetworkDriver.Join": join, "NetworkDriver.Leave": leave,
           "NetworkDriver.ProgramExternalConnectivity": external("programmed"),
           "NetworkDriver.RevokeExternalConnectivity": external("revoked"),
           "NetworkDriver.DiscoverNew": discover(True),
           "NetworkDriver.DiscoverDelete": discover(False)}
    if args.get("external") == "none":  # a plugin of before the method (a 404)
        del out["NetworkDriver.ProgramExternalConnectivity"]
        del out["NetworkDriver.RevokeExternalConnectivity"]
    return out


def _delete(name: str) -> None:
    with IPRoute() as ip, contextlib.suppress(NetlinkError):
        for idx in ip.link_lookup(ifname=name):
            ip.link("del", index=idx)
