"""The embedded DNS server on user networks: names, aliases and short ids of containers on a
shared network; other names forwarded to upstream servers (a resolver this test starts)."""

from __future__ import annotations

import ipaddress
import random
import socket
import struct

import httpx
import trio

from tests.containers.conftest import create, inspect, output, run
from tests.support.daemon import _free_subnet


async def started(api: httpx.AsyncClient, cmd: list[str], **fields: object) -> str:
    cid: str = (await create(api, cmd, **fields))["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 204, r.text
    return cid


async def _resolver(address: str, task_status: trio.TaskStatus[None]) -> None:
    """Answers every A question with 10.9.8.7 (and counts as the host's upstream)."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with sock:
        await sock.bind((address, 53))
        task_status.started()
        while True:
            msg, addr = await sock.recvfrom(512)
            qid, flags = struct.unpack_from(">HH", msg)
            end = msg.index(b"\0", 12) + 5
            qtype = struct.unpack_from(">H", msg, end - 4)[0]
            answers = [struct.pack(">HHHIH", 0xC00C, 1, 1, 60, 4) + bytes([10, 9, 8, 7])] \
                if qtype == 1 else []
            head = struct.pack(">HHHHHH", qid, 0x8180, 1, len(answers), 0, 0)
            await sock.sendto(head + msg[12:end] + b"".join(answers), addr)


async def test_names_aliases_and_forwarding(api: httpx.AsyncClient) -> None:
    sub = str(ipaddress.IPv4Interface(_free_subnet()).network)
    r = await api.post("/networks/create", json={"Name": "dnsnet",
                                                 "IPAM": {"Config": [{"Subnet": sub}]}})
    assert r.status_code == 201, r.text
    web = await started(api, ["sleep", "60"], name="web", HostConfig={"NetworkMode": "dnsnet"},
                        NetworkingConfig={"EndpointsConfig": {"dnsnet": {"Aliases": ["www"]}}})
    web_ip = (await inspect(api, web))["NetworkSettings"]["Networks"]["dnsnet"]["IPAddress"]
    upstream = f"127.{random.randint(100, 250)}.{random.randint(0, 255)}.9"
    async with trio.open_nursery() as nursery:
        await nursery.start(_resolver, upstream)
        cid, code = await run(api, ["sh", "-c", "cat /etc/resolv.conf; "
                                                "for n in web www " + web[:12] + " "
                                                "elsewhere.example; do nslookup $n; done"],
                              HostConfig={"NetworkMode": "dnsnet", "Dns": [upstream]})
        nursery.cancel_scope.cancel()
    out = await output(api, cid)
    assert "nameserver 127.0.0.11" in out and "options ndots:0" in out
    assert out.count(f"Address: {web_ip}") == 3, out  # name, alias, short id
    assert "Address: 10.9.8.7" in out, out  # forwarded to the upstream
    # not on the default bridge (no embedded server there), nor for another network's names
    cid, _ = await run(api, ["cat", "/etc/resolv.conf"])
    assert "127.0.0.11" not in await output(api, cid)
    for item in (await api.get("/containers/json", params={"all": "1"})).json():
        await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
    assert (await api.delete("/networks/dnsnet")).status_code == 204


async def test_daemon_dns_flag(spawn) -> None:  # type: ignore[no-untyped-def]
    """``--dns``: the servers of default-bridge containers' resolv.conf (the embedded server's
    upstream on user networks), unless a container sets its own."""
    from tests.conftest import http_client
    from tests.support import images as timg

    d = spawn(["--dns", "10.1.2.3", "--dns", "10.1.2.4"])
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        await timg.import_busybox(c)
        cid, _ = await run(c, ["cat", "/etc/resolv.conf"])
        servers = [ln.split()[1] for ln in (await output(c, cid)).splitlines()
                   if ln.startswith("nameserver")]
        assert servers == ["10.1.2.3", "10.1.2.4"]
        cid, _ = await run(c, ["cat", "/etc/resolv.conf"], HostConfig={"Dns": ["10.9.9.9"]})
        assert "nameserver 10.9.9.9" in await output(c, cid)
        assert "10.1.2.3" not in await output(c, cid)
        for item in (await c.get("/containers/json", params={"all": "1"})).json():
            await c.delete(f"/containers/{item['Id']}", params={"force": "1"})


async def test_endpoint_links_and_the_short_id_alias(api: httpx.AsyncClient) -> None:
    """EndpointConfig.Links on a user network (and HostConfig.Links with a user NetworkMode,
    as the CLI's --link --net sends it): the alias resolves in the linking container only,
    inspect shows the links, and a user network's Aliases carry the short id once attached."""
    sub = str(ipaddress.IPv4Interface(_free_subnet()).network)
    r = await api.post("/networks/create", json={"Name": "linknet",
                                                 "IPAM": {"Config": [{"Subnet": sub}]}})
    assert r.status_code == 201, r.text
    db = await started(api, ["sleep", "60"], name="ldb", HostConfig={"NetworkMode": "linknet"})
    db_ip = (await inspect(api, db))["NetworkSettings"]["Networks"]["linknet"]["IPAddress"]
    ep = {"EndpointsConfig": {"linknet": {"Links": ["ldb:database"], "Aliases": ["app"]}}}
    cid, code = await run(api, ["nslookup", "database"], HostConfig={"NetworkMode": "linknet"},
                          NetworkingConfig=ep)
    assert code == 0 and f"Address: {db_ip}" in await output(api, cid)
    settings = (await inspect(api, cid))["NetworkSettings"]["Networks"]["linknet"]
    assert settings["Links"] == ["ldb:database"]
    running = await started(api, ["sleep", "60"], HostConfig={"NetworkMode": "linknet",
                                                              "Links": ["ldb:db2"]})
    info = await inspect(api, running)
    assert info["NetworkSettings"]["Networks"]["linknet"]["Links"] == ["ldb:db2"]
    assert info["NetworkSettings"]["Networks"]["linknet"]["Aliases"] == [running[:12]]
    assert info["HostConfig"]["Links"] is None
    other, code = await run(api, ["nslookup", "database"],
                            HostConfig={"NetworkMode": "linknet"})
    assert code != 0  # a link's alias is the linking container's own
    for item in (await api.get("/containers/json", params={"all": "1"})).json():
        await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
    assert (await api.delete("/networks/linknet")).status_code == 204
