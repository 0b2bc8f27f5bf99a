"""Published ports: PortBindings (fixed, random, ranges), PublishAllPorts, tcp and udp through
the userland proxy, a taken port refused with nothing left bound, the shapes, the CLI."""

from __future__ import annotations

import json
import socket

import httpx
import trio

from tests.conftest import docker_cli
from tests.containers.conftest import create, inspect, iptables_rules
from tests.support.daemon import Daemon

HTTPD = ["sh", "-c", "mkdir -p /www && echo hello-port > /www/index.html && "
                     "exec httpd -f -p 80 -h /www"]


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def started(api: httpx.AsyncClient, cmd: list[str], **fields: object) -> str:
    cid: str = (await create(api, cmd, **fields))["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 204, r.text
    return cid


async def nat_rules() -> str:
    return await iptables_rules("-t", "nat", "-S")


async def fetch(port: int) -> str:
    """GET / on 127.0.0.1:port, retried while the server in the container starts."""
    with trio.fail_after(20):
        while True:
            try:
                async with httpx.AsyncClient() as c:
                    r = await c.get(f"http://127.0.0.1:{port}/index.html", timeout=5)
                return r.text
            except httpx.HTTPError:
                await trio.sleep(0.1)


async def test_tcp_published_on_loopback(api: httpx.AsyncClient) -> None:
    fixed = free_port()
    cid = await started(api, HTTPD, ExposedPorts={"80/tcp": {}}, HostConfig={"PortBindings": {
        "80/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(fixed)},
                   {"HostIp": "127.0.0.1", "HostPort": ""}]}})
    ports = (await inspect(api, cid))["NetworkSettings"]["Ports"]["80/tcp"]
    assert ports[0] == {"HostIp": "127.0.0.1", "HostPort": str(fixed)}
    random_port = int(ports[1]["HostPort"])
    assert random_port != fixed
    assert await fetch(fixed) == "hello-port\n" and await fetch(random_port) == "hello-port\n"
    listed = (await api.get("/containers/json")).json()
    assert sorted((p["IP"], p["PrivatePort"], p["PublicPort"], p["Type"])
                  for p in listed[0]["Ports"]) == sorted(
        [("127.0.0.1", 80, fixed, "tcp"), ("127.0.0.1", 80, random_port, "tcp")])
    ip = (await inspect(api, cid))["NetworkSettings"]["IPAddress"]
    assert f"--to-destination {ip}:80" not in await nat_rules()  # loopback: the proxy only
    assert (await api.post(f"/containers/{cid}/stop", params={"t": "0"})).status_code == 204
    with socket.socket() as s:  # released at the stop
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", fixed))
    stopped = (await inspect(api, cid))["NetworkSettings"]["Ports"]
    assert stopped == {"80/tcp": None}


async def test_a_taken_port_fails_the_start_and_leaves_nothing(api: httpx.AsyncClient) -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = holder.getsockname()[1]
    other = free_port()
    try:
        cid = (await create(api, HTTPD, HostConfig={"PortBindings": {
            "81/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(other)}],
            "80/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(taken)}]}}))["Id"]
        r = await api.post(f"/containers/{cid}/start")
        assert r.status_code == 409 and "port is already allocated" in r.text
        assert (await inspect(api, cid))["State"]["Running"] is False
        with socket.socket() as s:  # the other port was given back
            s.bind(("127.0.0.1", other))
    finally:
        holder.close()
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "HostConfig": {"PortBindings": {
                                                       "80/sctp": [{"HostPort": "1"}]}}})
    assert r.status_code == 400 and "invalid port specification" in r.text
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "HostConfig": {"PortBindings": {
                                                       "80/tcp": [{"HostIp": "nope"}]}}})
    assert r.status_code == 400 and "invalid host IP" in r.text


async def test_publish_all(api: httpx.AsyncClient) -> None:
    """Every exposed port on a free host port of every address (busybox has no UDP server:
    the UDP proxy is tested on its own, in tests/unit/network/test_proxy.py)."""
    cid = await started(api, HTTPD, ExposedPorts={"80/tcp": {}, "5000/udp": {}},
                        HostConfig={"PublishAllPorts": True})
    ports = (await inspect(api, cid))["NetworkSettings"]["Ports"]
    assert set(ports) == {"80/tcp", "5000/udp"}
    assert ports["80/tcp"][0]["HostIp"] == "0.0.0.0"
    assert int(ports["5000/udp"][0]["HostPort"]) > 0
    assert await fetch(int(ports["80/tcp"][0]["HostPort"])) == "hello-port\n"
    # on every address: DNAT rules beside the proxy for traffic from elsewhere, gone at stop
    ip = (await inspect(api, cid))["NetworkSettings"]["IPAddress"]
    port = ports["80/tcp"][0]["HostPort"]
    nat = await nat_rules()
    assert f"--dport {port} -j DNAT --to-destination {ip}:80" in nat
    assert (await api.post(f"/containers/{cid}/stop", params={"t": "0"})).status_code == 204
    assert f"--to-destination {ip}:" not in await nat_rules()


async def test_cli_publish_and_port(cdaemon: Daemon, host: str) -> None:
    port = free_port()
    r = docker_cli(host, "run", "-d", "-p", f"127.0.0.1:{port}:80", "busybox", *HTTPD)
    assert r.returncode == 0, r.stderr
    cid = r.stdout.strip()
    assert await fetch(port) == "hello-port\n"
    r = docker_cli(host, "port", cid)
    assert r.stdout.strip() == f"80/tcp -> 127.0.0.1:{port}"
    r = docker_cli(host, "run", "-d", "-P", "--expose", "80", "busybox", *HTTPD)
    assert r.returncode == 0, r.stderr
    out = docker_cli(host, "port", r.stdout.strip(), "80").stdout.strip()
    assert out.startswith("0.0.0.0:")
    assert await fetch(int(out.rsplit(":", 1)[1])) == "hello-port\n"
    assert json.loads(docker_cli(host, "inspect", cid).stdout)[0]["State"]["Running"]

