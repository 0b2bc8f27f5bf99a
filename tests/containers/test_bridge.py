"""The default bridge: a container's eth0, address, MAC, route and /etc/hosts line, traffic
between containers and to the gateway, the outbound rules, and nothing left after a stop."""

from __future__ import annotations

import ipaddress
import json
import time

import httpx
import trio

from svc.network import bridge as br
from tests.containers.conftest import create, inspect, iptables_rules, output, run
from tests.support.daemon import Daemon


async def started(api: httpx.AsyncClient, cmd: list[str], **fields: object) -> str:
    cid: str = (await create(api, cmd, **fields))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    return cid


async def test_a_container_on_the_bridge(api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    subnet = ipaddress.IPv4Interface(cdaemon.bip).network
    gateway = str(ipaddress.IPv4Interface(cdaemon.bip).ip)
    cid, code = await run(api, ["sh", "-c", "ip -4 -o addr show eth0; ip route; "
                                            "cat /sys/class/net/eth0/address; "
                                            f"ping -c 1 -W 2 {gateway} >/dev/null && echo gw-ok; "
                                            "tail -1 /etc/hosts"])
    out = (await output(api, cid)).splitlines()
    assert code == 0, out
    address = out[0].split()[3]
    ip = ipaddress.IPv4Interface(address)
    assert ip.network == subnet and str(ip.ip) != gateway
    assert any(line.startswith(f"default via {gateway} dev eth0") for line in out)
    mac = "02:42:" + ":".join(f"{b:02x}" for b in ip.ip.packed)
    assert mac in out and "gw-ok" in out
    assert out[-1].split() == [str(ip.ip), cid[:12]]
    # while running, inspect shows the address; after the exit it is freed
    cid2 = await started(api, ["sleep", "30"])
    ns = (await inspect(api, cid2))["NetworkSettings"]
    assert ns["Networks"]["bridge"]["Gateway"] == gateway == ns["Gateway"]
    assert ipaddress.IPv4Address(ns["IPAddress"]) in subnet and ns["IPPrefixLen"] == 24
    assert ns["MacAddress"] == ns["Networks"]["bridge"]["MacAddress"] and ns["Bridge"] == \
        cdaemon.bridge
    assert ns["Networks"]["bridge"]["NetworkID"] and ns["Networks"]["bridge"]["EndpointID"]
    assert br.links_on(cdaemon.bridge) == [f"s0{cid2[:12]}h"]  # eth0 of cid2
    assert (await api.post(f"/containers/{cid2}/stop", params={"t": "0"})).status_code == 204
    assert br.links_on(cdaemon.bridge) == []
    ns = (await inspect(api, cid2))["NetworkSettings"]
    assert ns["IPAddress"] == "" and ns["Networks"]["bridge"]["IPAddress"] == ""


async def test_containers_reach_each_other(api: httpx.AsyncClient) -> None:
    # busybox nc quits at its stdin's EOF, maybe before it has read the client's line (a
    # loaded machine lost it): its stdin stays open, and the test reads the log instead
    server = await started(api, ["sh", "-c", "sleep 60 | nc -l -p 7000"])
    ip = (await inspect(api, server))["NetworkSettings"]["IPAddress"]
    with trio.fail_after(20):
        while True:  # nc listens a moment after the start
            cid, code = await run(api, ["sh", "-c", f"echo hello | nc {ip} 7000"])
            if code == 0:
                break
            await trio.sleep(0.1)
        while await output(api, server) != "hello\n":
            await trio.sleep(0.1)


async def test_outbound_rules_and_events(api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    subnet = str(ipaddress.IPv4Interface(cdaemon.bip).network)
    nat = await iptables_rules("-t", "nat", "-S", "POSTROUTING")
    assert f"-A POSTROUTING -s {subnet} ! -o {cdaemon.bridge} -j MASQUERADE" in nat
    fwd = await iptables_rules("-S", "FORWARD")
    assert f"-A FORWARD -i {cdaemon.bridge} ! -o {cdaemon.bridge} -j ACCEPT" in fwd
    since = time.time()
    cid, _ = await run(api, ["true"])
    r = await api.get("/events", params={"since": str(since), "until": str(time.time() + 1),
                                         "filters": json.dumps({"type": ["network"]})})
    events = [json.loads(line) for line in r.text.splitlines()]
    assert [e["Action"] for e in events] == ["connect", "disconnect"]
    assert events[0]["Actor"]["Attributes"] == {"container": cid, "name": "bridge",
                                                "type": "bridge"}


async def test_network_mode_none_has_no_eth0(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["ls", "/sys/class/net"], HostConfig={"NetworkMode": "none"})
    assert await output(api, cid) == "lo\n"
    assert (await inspect(api, cid))["NetworkSettings"]["Networks"]["none"]["IPAddress"] == ""


async def test_builtin_networks(api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    nets = (await api.get("/networks")).json()
    assert [(n["Name"], n["Driver"], n["Scope"]) for n in nets] == [
        ("bridge", "bridge", "local"), ("host", "host", "local"), ("none", "null", "local")]
    bridge = nets[0]
    assert bridge["IPAM"]["Config"] == [{"Subnet": str(ipaddress.IPv4Interface(
        cdaemon.bip).network), "Gateway": str(ipaddress.IPv4Interface(
            cdaemon.bip).ip)}]
    assert bridge["Options"]["com.docker.network.bridge.name"] == cdaemon.bridge
    assert bridge["Internal"] is False and bridge["EnableIPv6"] is False
    # compose 1.x reads Internal at 1.22 and compares the IPAM object with its null Options
    old = (await api.get("/v1.22/networks")).json()[0]
    assert old["Internal"] is False and old["IPAM"]["Options"] is None
    cid = await started(api, ["sleep", "30"])
    for ref in ("bridge", bridge["Id"], bridge["Id"][:12]):
        got = (await api.get(f"/networks/{ref}")).json()
        entry = got["Containers"][cid]
        assert entry["IPv4Address"].endswith("/24") and entry["MacAddress"].startswith("02:42")
    assert (await api.get("/networks/nosuch")).status_code == 404
    r = await api.get("/networks", params={"filters": json.dumps({"name": ["bri"]})})
    assert [n["Name"] for n in r.json()] == ["bridge"]
    r = await api.get("/networks", params={"filters": json.dumps({"type": ["custom"]})})
    assert r.json() == []
    r = await api.get("/networks", params={"filters": json.dumps({"type": ["nope"]})})
    assert r.status_code == 400
    assert (await api.post(f"/containers/{cid}/kill")).status_code == 204


def test_cli_network_ls_and_inspect(cdaemon: Daemon, host: str) -> None:
    from tests.conftest import docker_cli

    r = docker_cli(host, "network", "ls", "--format", "{{.Name}} {{.Driver}}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["bridge bridge", "host host", "none null"]
    r = docker_cli(host, "network", "inspect", "bridge")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["Name"] == "bridge"
    r = docker_cli(host, "run", "--rm", "busybox", "sh", "-c", "ip -4 -o addr show eth0")
    assert r.returncode == 0 and str(ipaddress.IPv4Interface(cdaemon.bip).network)[:-5] in \
        r.stdout


async def test_links_on_the_default_bridge(api: httpx.AsyncClient) -> None:
    db = await started(api, ["sleep", "30"], name="linkdb", Env=["SECRET=s3"],
                       ExposedPorts={"5432/tcp": {}})
    db_ip = (await inspect(api, db))["NetworkSettings"]["IPAddress"]
    cid, code = await run(api, ["sh", "-c", "grep linkdb /etc/hosts; env | sort | grep ^DB_"],
                          name="linkweb", HostConfig={"Links": ["linkdb:db"]})
    out = (await output(api, cid)).splitlines()
    assert code == 0 and out[0].split() == [db_ip, "db", db[:12], "linkdb"]
    assert f"DB_PORT=tcp://{db_ip}:5432" in out and "DB_NAME=/linkweb/db" in out
    assert f"DB_PORT_5432_TCP_ADDR={db_ip}" in out and "DB_ENV_SECRET=s3" in out
    names = {tuple(c["Names"]) for c in (await api.get("/containers/json", params={
        "all": "1"})).json()}
    assert ("/linkdb", "/linkweb/db") in names
    assert (await inspect(api, cid))["HostConfig"]["Links"] == ["/linkdb:/linkweb/db"]
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "HostConfig": {"Links": ["nosuch:x"]}})
    assert r.status_code == 404 and "Could not get container for nosuch" in r.text
    await api.post(f"/containers/{db}/kill")
    await api.post(f"/containers/{db}/wait")
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 409 and "Cannot link to a non running container" in r.text
    # docker-py's remove_container('linkweb/db', link=True): the link goes, both stay
    assert (await api.delete("/containers/linkweb/nosuch", params={"link": "1"})) \
        .status_code == 404
    assert (await api.delete("/containers/linkweb/db")).status_code == 404  # no link=1
    r = await api.delete("/containers/linkweb/db", params={"link": "1"})
    assert r.status_code == 204, r.text
    assert (await inspect(api, cid))["HostConfig"]["Links"] is None
    listed = (await api.get("/containers/json", params={"all": "1"})).json()
    assert {c["Id"] for c in listed} >= {cid, db}
    assert not any("/linkweb/db" in c["Names"] for c in listed)
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204  # no link now


async def test_mac_address_is_applied(api: httpx.AsyncClient) -> None:
    cid, code = await run(api, ["cat", "/sys/class/net/eth0/address"],
                          MacAddress="92:d0:c6:0A:29:33")
    assert code == 0 and (await output(api, cid)).strip() == "92:d0:c6:0a:29:33"
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "MacAddress": "92:d0:zz"})
    assert r.status_code == 400 and "invalid MAC address" in r.text
