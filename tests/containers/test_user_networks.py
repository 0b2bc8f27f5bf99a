"""User bridge networks: create, list, inspect, connect and disconnect (live), remove; static
addresses; isolation from other networks; internal networks; the CLI."""

from __future__ import annotations

import ipaddress
import json
import random
import time

import httpx
import pytest
import trio

from svc.network import bridge as br
from tests.conftest import docker_cli, run_sdk
from tests.containers.conftest import create, inspect, iptables_rules, output, run
from tests.support.daemon import Daemon, _free_subnet


def subnet() -> str:
    return str(ipaddress.IPv4Interface(_free_subnet()).network)


async def started(api: httpx.AsyncClient, cmd: list[str], **fields: object) -> str:
    cid: str = (await create(api, cmd, **fields))["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 204, r.text
    return cid


async def new_network(api: httpx.AsyncClient, name: str, **body: object) -> dict[str, object]:
    r = await api.post("/networks/create", json={"Name": name, **body})
    assert r.status_code == 201, r.text
    return (await api.get(f"/networks/{r.json()['Id']}")).json()  # type: ignore[no-any-return]


async def test_create_inspect_remove(api: httpx.AsyncClient) -> None:
    since = time.time()
    sub = subnet()
    net = await new_network(api, "n1", CheckDuplicate=True, Labels={"k": "v"},
                            Options={"com.example.opt": "1"},
                            IPAM={"Config": [{"Subnet": sub}], "Options": {"o": "x"}})
    assert net["IPAM"]["Options"] == {"o": "x"}  # type: ignore[index]
    assert net["Options"] == {"com.example.opt": "1"} and net["Labels"] == {"k": "v"}
    assert net["Driver"] == "bridge" and net["Scope"] == "local" and net["Internal"] is False
    # the pool as asked for, no gateway added (the engines showed the configured pool)
    assert net["IPAM"]["Config"] == [{"Subnet": sub}]
    bridge = f"br-{net['Id'][:12]}"  # type: ignore[index]
    assert bridge in [link for link in _links()]
    for body, status, message in [
        ({"Name": "n1", "CheckDuplicate": True}, 409, "already exists"),
        ({"Name": "n2", "IPAM": {"Config": [{"Subnet": sub}]}}, 409, "Pool overlaps"),
        ({"Name": "n3", "IPAM": {"Config": [{"Subnet": "10.0.0.0/33"}]}}, 400, "invalid subnet"),
        ({"Name": "n4", "Driver": "overlay"}, 400, "the overlay driver needs a cluster store"),
        ({"Name": "n4", "Driver": "macvlan"}, 404, "plugin not found"),
        ({"Name": "n4", "Driver": "d" * 3000}, 404, "plugin not found"),
        ({"Name": ""}, 400, "Name is required"),
        ({"Name": "n5", "IPAM": {"Config": [{"Subnet": subnet(), "Gateway": "1.2.3.4"}]}}, 400,
         "invalid Gateway"),
    ]:
        r = await api.post("/networks/create", json=body)
        assert (r.status_code, message in r.text) == (status, True), r.text
    r = await api.get("/networks", params={"filters": json.dumps({"type": ["custom"]})})
    assert [n["Name"] for n in r.json()] == ["n1"]
    assert (await api.delete("/networks/bridge")).status_code == 403
    cid = await started(api, ["sleep", "30"], HostConfig={"NetworkMode": "n1"})
    r = await api.delete("/networks/n1")
    assert r.status_code == 409 and "active endpoints" in r.text
    await api.post(f"/containers/{cid}/kill")
    await api.post(f"/containers/{cid}/wait")
    assert (await api.delete("/networks/n1")).status_code == 204
    assert bridge not in _links()
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 404 and "network n1 not found" in r.text
    r = await api.get("/events", params={"since": str(since), "until": str(time.time() + 1),
                                         "filters": json.dumps({"type": ["network"]})})
    actions = [json.loads(line)["Action"] for line in r.text.splitlines()]
    assert actions == ["create", "connect", "disconnect", "destroy"]


def _links() -> list[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        return [str(link.get_attr("IFLA_IFNAME")) for link in ip.get_links()]


async def test_same_network_talks_other_networks_do_not(api: httpx.AsyncClient) -> None:
    await new_network(api, "talk", IPAM={"Config": [{"Subnet": subnet()}]})
    # busybox nc quits at its stdin's EOF, maybe before it has read the client's line (a
    # loaded machine lost it): its stdin stays open, and the test reads the log instead
    server = await started(api, ["sh", "-c", "sleep 60 | nc -l -p 7000"],
                           HostConfig={"NetworkMode": "talk"})
    ip = (await inspect(api, server))["NetworkSettings"]["Networks"]["talk"]["IPAddress"]
    # from the default bridge: forwarding between our bridges is dropped
    cid, code = await run(api, ["sh", "-c", f"echo no | nc -w 2 {ip} 7000"])
    assert code != 0
    with trio.fail_after(20):
        while True:
            cid, code = await run(api, ["sh", "-c", f"echo hello | nc {ip} 7000"],
                                  HostConfig={"NetworkMode": "talk"})
            if code == 0:
                break
            await trio.sleep(0.1)
        while await output(api, server) != "hello\n":
            await trio.sleep(0.1)


async def test_static_address_and_live_connect(api: httpx.AsyncClient) -> None:
    sub = subnet()
    await new_network(api, "stat", IPAM={"Config": [{"Subnet": sub}]})
    fixed = str(ipaddress.IPv4Network(sub).network_address + 50)
    cid = await started(api, ["sleep", "60"], HostConfig={"NetworkMode": "stat"},
                        NetworkingConfig={"EndpointsConfig": {"stat": {
                            "IPAMConfig": {"IPv4Address": fixed}}}})
    nets = (await inspect(api, cid))["NetworkSettings"]["Networks"]
    assert nets["stat"]["IPAddress"] == fixed
    twin = (await create(api, ["sleep", "60"], HostConfig={"NetworkMode": "stat"},
                         NetworkingConfig={"EndpointsConfig": {"stat": {
                             "IPAMConfig": {"IPv4Address": fixed}}}}))["Id"]
    r = await api.post(f"/containers/{twin}/start")
    assert r.status_code == 409 and "Address already in use" in r.text
    # a container on the default bridge joins "stat" live, then leaves it
    other = await started(api, ["sleep", "60"])
    r = await api.post("/networks/stat/connect", json={"Container": other})
    assert r.status_code == 200, r.text
    r = await api.post("/networks/stat/connect", json={"Container": other})
    assert r.status_code == 409
    ex = (await api.post(f"/containers/{other}/exec", json={
        "Cmd": ["ls", "/sys/class/net"], "AttachStdout": True})).json()["Id"]
    r = await api.post(f"/exec/{ex}/start", json={"Detach": False})
    assert b"eth1" in r.content
    nets = (await inspect(api, other))["NetworkSettings"]["Networks"]
    assert set(nets) == {"bridge", "stat"} and nets["stat"]["IPAddress"]
    listed = (await api.get("/containers/json", params={
        "filters": json.dumps({"network": ["stat"]})})).json()
    assert {x["Id"] for x in listed} == {cid, other}
    r = await api.post("/networks/stat/disconnect", json={"Container": other})
    assert r.status_code == 200, r.text
    assert set((await inspect(api, other))["NetworkSettings"]["Networks"]) == {"bridge"}
    assert not [x for x in br.links_on(f"br-{(await api.get('/networks/stat')).json()['Id'][:12]}")
                if x.startswith("s1")]


async def test_an_exhausted_pool_is_a_409(api: httpx.AsyncClient) -> None:
    sub = ipaddress.IPv4Network(subnet())
    tiny = str(next(sub.subnets(new_prefix=30)))  # the gateway and one container
    await new_network(api, "tiny", IPAM={"Config": [{"Subnet": tiny}]})
    await started(api, ["sleep", "30"], HostConfig={"NetworkMode": "tiny"})
    cid = (await create(api, ["sleep", "30"], HostConfig={"NetworkMode": "tiny"}))["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 409 and "no available IPv4 addresses" in r.text
    assert (await inspect(api, cid))["State"]["Running"] is False
    for item in (await api.get("/containers/json", params={"all": "1"})).json():
        await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
    assert (await api.delete("/networks/tiny")).status_code == 204


async def test_ipv6_network(api: httpx.AsyncClient) -> None:
    prefix = f"fd{random.randint(0, 255):02x}:{random.randint(0, 65535):x}:1::"
    # EnableIPv6 alone: a unique local /64 is allocated (docker-py's own suite expects it)
    r = await api.post("/networks/create", json={"Name": "sixauto", "EnableIPv6": True})
    assert r.status_code == 201, r.text
    auto = (await api.get("/networks/sixauto")).json()
    assert auto["EnableIPv6"] is True
    v6 = ipaddress.IPv6Network(auto["IPAM"]["Config"][1]["Subnet"])
    assert v6.prefixlen == 64 and v6.subnet_of(ipaddress.IPv6Network("fd00::/8"))
    assert (await api.delete("/networks/sixauto")).status_code == 204
    net = await new_network(api, "six", EnableIPv6=True, IPAM={"Config": [
        {"Subnet": subnet()}, {"Subnet": f"{prefix}/64"}]})
    assert net["EnableIPv6"] is True
    assert net["IPAM"]["Config"][1] == {"Subnet": f"{prefix}/64",  # type: ignore[index]
                                        "Gateway": f"{prefix}1"}
    fixed = f"{prefix}42"
    server = await started(api, ["sleep", "30"], HostConfig={"NetworkMode": "six"},
                           NetworkingConfig={"EndpointsConfig": {"six": {
                               "IPAMConfig": {"IPv6Address": fixed}}}})
    es = (await inspect(api, server))["NetworkSettings"]["Networks"]["six"]
    assert (es["GlobalIPv6Address"], es["GlobalIPv6PrefixLen"], es["IPv6Gateway"]) == \
        (fixed, 64, f"{prefix}1")
    cid, code = await run(api, ["sh", "-c", f"ip -6 -o addr show eth0 scope global; "
                                            f"ping -6 -c 1 -W 2 {fixed} >/dev/null && echo ok"],
                          HostConfig={"NetworkMode": "six"})
    out = await output(api, cid)
    assert code == 0 and f"inet6 {prefix}2/64" in out and "ok" in out, out
    inspected = (await api.get("/networks/six")).json()
    assert inspected["Containers"][server]["IPv6Address"] == f"{fixed}/64"
    for item in (await api.get("/containers/json", params={"all": "1"})).json():
        await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
    assert (await api.delete("/networks/six")).status_code == 204


async def test_internal_network_rules(api: httpx.AsyncClient) -> None:
    net = await new_network(api, "inner", Internal=True, IPAM={"Config": [{"Subnet": subnet()}]})
    bridge = f"br-{net['Id'][:12]}"  # type: ignore[index]
    fwd = await iptables_rules("-S", "FORWARD")
    assert f"-A FORWARD -i {bridge} ! -o {bridge} -j DROP" in fwd
    nat = await iptables_rules("-t", "nat", "-S")
    assert bridge not in nat  # no masquerade: nothing leaves
    assert net["Internal"] is True
    cid, code = await run(api, ["ip", "route"], HostConfig={"NetworkMode": "inner"})
    routes = await output(api, cid)
    assert code == 0 and "default" not in routes and "dev eth0" in routes  # no way out
    await api.delete(f"/containers/{cid}")
    assert (await api.delete("/networks/inner")).status_code == 204
    fwd = await iptables_rules("-S", "FORWARD")
    assert bridge not in fwd


def test_cli_networks(cdaemon: Daemon, host: str) -> None:
    def ok(*args: str) -> str:
        r = docker_cli(host, *args)
        assert r.returncode == 0, r.stderr
        return r.stdout

    sub = subnet()
    ok("network", "create", "--subnet", sub, "clinet")
    assert "clinet" in ok("network", "ls", "--format", "{{.Name}}").split()
    assert json.loads(ok("network", "inspect", "clinet"))[0]["IPAM"]["Config"][0]["Subnet"] == sub
    out = ok("run", "--rm", "--net", "clinet", "--name", "onnet", "busybox", "ip", "-4", "-o",
             "addr", "show", "eth0")
    assert sub.rsplit(".", 1)[0] in out
    ok("run", "-d", "--name", "joiner", "busybox", "sleep", "60")
    ok("network", "connect", "clinet", "joiner")
    assert "clinet" in json.loads(ok("inspect", "joiner"))[0]["NetworkSettings"]["Networks"]
    ok("network", "disconnect", "clinet", "joiner")
    ok("rm", "-f", "joiner")
    ok("network", "rm", "clinet")


SDK_NETWORKS = """
import json, sys, docker
c = docker.APIClient(base_url=sys.argv[1], version="1.23") if hasattr(docker, "APIClient") \\
    else docker.Client(base_url=sys.argv[1], version="1.23")
ipam = {"Driver": "default", "Config": [{"Subnet": sys.argv[2]}]}
net = c.create_network("sdknet", driver="bridge", ipam=ipam)
ctr = c.create_container("busybox", ["sleep", "30"])
c.start(ctr)
c.connect_container_to_network(ctr, "sdknet")
out = {"id": net["Id"], "inspect": c.inspect_network("sdknet"),
       "names": [n["Name"] for n in c.networks()]}
c.disconnect_container_from_network(ctr, "sdknet")
c.remove_container(ctr, force=True)
c.remove_network("sdknet")
out["after"] = [n["Name"] for n in c.networks()]
print(json.dumps(out))
"""


@pytest.mark.parametrize("sdk", ["sdk7", "dockerpy1"])
def test_sdk_networks(cdaemon: Daemon, sdk: str) -> None:
    out = json.loads(run_sdk(sdk, SDK_NETWORKS, cdaemon.url, subnet()))
    assert out["inspect"]["Id"] == out["id"] and len(out["inspect"]["Containers"]) == 1
    assert "sdknet" in out["names"] and "sdknet" not in out["after"]


async def test_concurrent_removals_of_one_network(api: httpx.AsyncClient,
                                                  cdaemon: Daemon) -> None:
    """The second of two DELETEs that race is a 404, not a 500 (it found the network, then
    waited for the first to finish)."""
    from tests.conftest import http_client

    async def remove(c: httpx.AsyncClient, nid: str, statuses: list[int]) -> None:
        statuses.append((await c.delete(f"/networks/{nid}")).status_code)

    for i in range(5):
        net = await new_network(api, f"race{i}", IPAM={"Config": [{"Subnet": subnet()}]})
        statuses: list[int] = []
        async with http_client(cdaemon.sock) as other, trio.open_nursery() as nursery:
            nursery.start_soon(remove, api, str(net["Id"]), statuses)
            nursery.start_soon(remove, other, str(net["Id"]), statuses)
        assert sorted(statuses) == [204, 404], statuses


async def test_user_networks_cleanup(api: httpx.AsyncClient) -> None:
    """Each test above removes its networks; what a failing one left goes here."""
    for n in (await api.get("/networks")).json():
        if n["Name"] not in ("bridge", "host", "none"):
            for item in (await api.get("/containers/json", params={"all": "1"})).json():
                await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
            await api.delete(f"/networks/{n['Id']}")


async def test_create_as_docker_py_sends_it(api: httpx.AsyncClient) -> None:
    """The variants dockerd accepts: null IPRange and Gateway (docker-py's create_ipam_pool),
    an IPv6 pool without EnableIPv6 (kept and shown, not used), AuxiliaryAddresses (shown
    and never given to a container), and a second network of a name in use when
    CheckDuplicate is false (docker-py's default), with a Warning."""
    sub = subnet()
    net = ipaddress.IPv4Network(sub)
    aux = str(net.network_address + 1)
    prefix = f"fd{random.randint(0, 255):02x}:{random.randint(0, 65535):x}:2::"
    r = await api.post("/networks/create", json={"Name": "pyish", "IPAM": {
        "Driver": "default", "Config": [
            {"Subnet": sub, "IPRange": None, "Gateway": None,
             "AuxiliaryAddresses": {"router": aux}},
            {"Subnet": f"{prefix}/64", "Gateway": None, "IPRange": None}]}})
    assert r.status_code == 201, r.text
    info = (await api.get(f"/networks/{r.json()['Id']}")).json()
    assert info["EnableIPv6"] is False
    assert info["IPAM"]["Config"][0]["AuxiliaryAddresses"] == {"router": aux}
    assert info["IPAM"]["Config"][1] == {"Subnet": f"{prefix}/64"}
    cid = await started(api, ["sleep", "30"], HostConfig={"NetworkMode": "pyish"})
    es = (await inspect(api, cid))["NetworkSettings"]["Networks"]["pyish"]
    assert es["IPAddress"] not in (aux, str(net.network_address + 1))  # aux and gateway
    assert es["GlobalIPv6Address"] == ""  # the v6 pool is not used without EnableIPv6
    r = await api.post("/networks/create", json={"Name": "pyish", "CheckDuplicate": True})
    assert r.status_code == 409
    r = await api.post("/networks/create", json={"Name": "pyish"})
    assert r.status_code == 201 and "already exists" in r.json()["Warning"], r.text
    second = r.json()["Id"]
    r = await api.post("/networks/create", json={"Name": "bridge"})
    assert r.status_code == 409  # a built-in name, whatever CheckDuplicate says
    r = await api.post("/networks/create", json={"Name": "auxbad", "IPAM": {"Config": [
        {"Subnet": subnet(), "AuxiliaryAddresses": {"x": "192.0.2.1"}}]}})
    assert r.status_code == 400 and "auxiliary address" in r.text
    await api.delete(f"/containers/{cid}", params={"force": "1"})
    assert (await api.delete(f"/networks/{second}")).status_code == 204
    assert (await api.delete("/networks/pyish")).status_code == 204
