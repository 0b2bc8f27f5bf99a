"""An IPAM plugin with its own pools, as one written for Docker 1.11: ``RequestPool`` hands
out the pool asked for or the next free one of ``--arg pools=<cidr>,<cidr>...``, addresses
are handed out lowest first (from the sub-pool, if one was asked for), and everything it
handed out is recorded in ``<state>/ipam.json`` (written atomically at each change), so that a
restarted plugin keeps it and a test sees exactly what is held (``read_state``,
``allocated``).

``--arg requires-mac=1``: GetCapabilities asks for MACs (each request's options are
recorded). ``--arg gateway-data=1``: RequestPool names the gateway in its Data (the first
address), as some plugins did. Refusals answer 200 with ``Error`` (libnetwork's IPAM
responses), or with ``--arg err-status=500`` 500 with ``Err``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from pathlib import Path
from typing import Any

IMPLEMENTS = ["IpamDriver"]
GATEWAY = "com.docker.network.gateway"


def read_state(state: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((state / "ipam.json").read_text()))
    except FileNotFoundError:
        return {"pools": {}, "requests": []}


def allocated(state: Path) -> dict[str, list[str]]:
    """Pool -> the addresses held in it now."""
    return {p["pool"]: sorted(p["allocated"]) for p in read_state(state)["pools"].values()}


def make(state: Path, args: dict[str, str]) -> dict[str, Any]:
    lock = threading.Lock()
    offered = [p for p in args.get("pools", "").split(",") if p]
    err_status = int(args.get("err-status", "200"))

    def save(doc: dict[str, Any]) -> None:
        tmp = state / "ipam.json.tmp"
        tmp.write_text(json.dumps(doc, sort_keys=True))
        os.replace(tmp, state / "ipam.json")

    def refuse(words: str) -> tuple[int, Any]:
        if err_status == 200:
            return 200, {"Error": words}
        return err_status, {"Err": words}

    def capabilities(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"RequiresMACAddress": args.get("requires-mac") == "1"}

    def spaces(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"LocalDefaultAddressSpace": "TestLocal",
                     "GlobalDefaultAddressSpace": "TestGlobal"}

    def request_pool(body: dict[str, Any]) -> tuple[int, Any]:
        opts = body.get("Options") or {}
        if "refuse" in opts:
            return refuse(opts["refuse"])
        with lock:
            doc = read_state(state)
            used = [ipaddress.ip_network(p["pool"]) for p in doc["pools"].values()]
            if body.get("Pool"):
                pool = ipaddress.ip_network(body["Pool"], strict=False)
                if any(pool.overlaps(u) for u in used):
                    return refuse(f"pool {pool} overlaps with a pool in use")
            else:
                free = [ipaddress.ip_network(p) for p in offered
                        if not any(ipaddress.ip_network(p).overlaps(u) for u in used)]
                free = [p for p in free if (p.version == 6) == bool(body.get("V6"))]
                if not free:
                    return refuse("no available pool")
                pool = free[0]
            pool_id = f"{body.get('AddressSpace')}/{pool}"
            doc["pools"][pool_id] = {"pool": str(pool), "sub": body.get("SubPool") or "",
                                     "allocated": [], "options": opts}
            save(doc)
        data = {GATEWAY: f"{next(pool.hosts())}/{pool.prefixlen}"} \
            if args.get("gateway-data") == "1" else {}
        if data:
            with lock:
                doc = read_state(state)
                doc["pools"][pool_id]["allocated"].append(str(next(pool.hosts())))
                save(doc)
        return 200, {"PoolID": pool_id, "Pool": str(pool), "Data": data}

    def release_pool(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            if doc["pools"].pop(body["PoolID"], None) is None:
                return refuse(f"no such pool {body['PoolID']}")
            save(doc)
        return 200, {}

    def request_address(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            doc["requests"].append(body)
            pool = doc["pools"].get(body["PoolID"])
            if pool is None:
                return refuse(f"no such pool {body['PoolID']}")
            net = ipaddress.ip_network(pool["pool"])
            held = set(pool["allocated"])
            if body.get("Address"):
                ip = ipaddress.ip_address(body["Address"])
                if ip not in net:
                    return refuse(f"address {ip} is out of range of {net}")
                if str(ip) in held:
                    return refuse(f"address {ip} already in use")
            else:
                space = ipaddress.ip_network(pool["sub"], strict=False) if pool["sub"] and \
                    (body.get("Options") or {}).get("RequestAddressType") != GATEWAY else net
                ip = next((h for h in space.hosts() if str(h) not in held), None)
                if ip is None:
                    return refuse(f"no available addresses in {space}")
            pool["allocated"].append(str(ip))
            save(doc)
        return 200, {"Address": f"{ip}/{net.prefixlen}", "Data": {}}

    def release_address(body: dict[str, Any]) -> tuple[int, Any]:
        with lock:
            doc = read_state(state)
            pool = doc["pools"].get(body["PoolID"])
            if pool is None or body.get("Address") not in pool["allocated"]:
                return refuse(f"address {body.get('Address')} not allocated in "
                              f"{body['PoolID']}")
            pool["allocated"].remove(body["Address"])
            save(doc)
        return 200, {}

    return {"IpamDriver.GetCapabilities": capabilities,
            "IpamDriver.GetDefaultAddressSpaces": spaces,
            "IpamDriver.RequestPool": request_pool, "IpamDriver.ReleasePool": release_pool,
            "IpamDriver.RequestAddress": request_address,
            "IpamDriver.ReleaseAddress": release_address}
