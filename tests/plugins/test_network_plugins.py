"""Network and IPAM plugins through the CLI and both SDKs: a network made by a veth plugin
with addresses from an IPAM plugin, two containers on it that reach each other, the
interfaces, addresses and routes the plugins gave as a container sees them, the calls and
their bodies as libnetwork sent them, and the built-in driver and IPAM mixed with plugins."""

from __future__ import annotations

import ipaddress
import json

import pytest

from tests.conftest import run_sdk
from tests.plugins.network_helpers import (
    allocated,
    api,
    bodies,
    cli,
    inspect,
    ipam_plugin,
    links,
    methods,
    net_plugin,
    net_state,
    record,
    subnet,
    wait_for,
)
from tests.support.daemon import Daemon
from tests.support.plugins.process import PluginProcess

pytestmark = pytest.mark.usefixtures("netlinks")


def host_of(sub: str, n: int) -> str:
    return str(ipaddress.IPv4Network(sub).network_address + n)


def test_cli_plugin_network_with_an_ipam_plugin(nhost: str, ndaemon: Daemon,
                                                plugins: list[PluginProcess]) -> None:
    sub = subnet()
    drv = net_plugin(plugins, ndaemon, "pnet")
    ipam = ipam_plugin(plugins, ndaemon, "pipam", sub)
    nid = cli(nhost, "network", "create", "-d", "pnet", "--ipam-driver", "pipam",
              "--subnet", sub, "-o", "route=10.99.0.0/16", "-o", "connected=10.98.0.0/16",
              "--ipam-opt", "flavour=plain", "pnw").strip()
    shown = json.loads(cli(nhost, "network", "inspect", "pnw"))[0]
    assert shown["Driver"] == "pnet" and shown["Scope"] == "local"
    assert shown["IPAM"] == {"Driver": "pipam", "Options": {"flavour": "plain"},
                             "Config": [{"Subnet": sub}]}
    assert shown["Options"] == {"route": "10.99.0.0/16", "connected": "10.98.0.0/16"}
    gw = host_of(sub, 1)
    # the IPAM plugin: its spaces, the pool, the gateway asked for as the gateway
    assert methods(ipam) == ["GetCapabilities", "GetDefaultAddressSpaces", "RequestPool",
                             "RequestAddress"]
    assert bodies(ipam, "RequestPool") == [{"AddressSpace": "TestLocal", "Pool": sub,
                                            "SubPool": "", "Options": {"flavour": "plain"},
                                            "V6": False}]
    assert bodies(ipam, "RequestAddress") == [{"PoolID": f"TestLocal/{sub}", "Address": "",
        "Options": {"RequestAddressType": "com.docker.network.gateway"}}]
    # the driver: its scope, then the network with the pool the IPAM gave
    assert methods(drv) == ["GetCapabilities", "CreateNetwork"]
    assert bodies(drv, "CreateNetwork") == [{
        "NetworkID": nid,
        "Options": {"com.docker.network.generic": {"route": "10.99.0.0/16",
                                                   "connected": "10.98.0.0/16"},
                    "com.docker.network.enable_ipv6": False},
        "IPv4Data": [{"AddressSpace": "TestLocal", "Pool": sub, "Gateway": f"{gw}/24"}],
        "IPv6Data": []}]
    assert record(ndaemon, "pnw")["Pool4"]["PoolID"] == f"TestLocal/{sub}"
    assert "pnet" in json.loads(cli(nhost, "info", "--format", "{{json .Plugins.Network}}"))

    server = cli(nhost, "run", "-d", "--name", "pserver", "--net", "pnw", "-p", "8080:80",
                 "busybox", "sh", "-c", "sleep 60 | nc -l -p 7000").strip()
    out = cli(nhost, "run", "--rm", "--net", "pnw", "busybox", "sh", "-c",
              "ip -o addr show eth0; ip route; ls /sys/class/net; ping -c 1 -W 5 pserver; "
              "echo hello | nc pserver 7000")
    assert f"inet {host_of(sub, 3)}/24" in out  # (.2 went to the server)
    assert f"default via {gw} dev eth0" in out
    assert f"10.99.0.0/16 via {gw} dev eth0" in out  # RouteType 0: through the next hop
    assert "10.98.0.0/16 dev eth0 scope link" in out  # RouteType 1: connected
    assert "eth0\nlo\n" in out  # the plugin's interface, renamed as libnetwork named it
    assert f"64 bytes from {host_of(sub, 2)}" in out  # the two containers reach each other
    wait_for(lambda: cli(nhost, "logs", server) == "hello\n", message="the server's log")

    settings = inspect(nhost, server)["NetworkSettings"]["Networks"]["pnw"]
    assert settings["IPAddress"] == host_of(sub, 2) and settings["Gateway"] == gw
    assert settings["IPPrefixLen"] == 24 and settings["MacAddress"]
    containers = json.loads(cli(nhost, "network", "inspect", "pnw"))[0]["Containers"]
    assert containers[server]["IPv4Address"] == f"{host_of(sub, 2)}/24"
    assert containers[server]["MacAddress"] == settings["MacAddress"]
    eid = settings["EndpointID"]
    # the server's calls, as libnetwork made them
    [create] = [b for b in bodies(drv, "CreateEndpoint") if b["EndpointID"] == eid]
    assert create["Interface"] == {"Address": f"{host_of(sub, 2)}/24", "AddressIPv6": "",
                                   "MacAddress": ""}
    assert create["Options"]["com.docker.network.portmap"] == [
        {"Proto": 6, "IP": "", "Port": 80, "HostIP": "", "HostPort": 8080,
         "HostPortEnd": 8080}]
    [join] = [b for b in bodies(drv, "Join") if b["EndpointID"] == eid]
    pid = inspect(nhost, server)["State"]["Pid"]
    assert join["SandboxKey"] == f"/proc/{pid}/ns/net"
    assert join["Options"]["com.docker.network.endpoint.exposedports"] == [
        {"Proto": 6, "Port": 80}]
    assert [b["EndpointID"] for b in bodies(drv, "ProgramExternalConnectivity")].count(eid) == 1
    server_calls = [c["method"].split(".")[1] for c in drv.calls()
                    if (c["body"] or {}).get("EndpointID") == eid]
    assert server_calls == ["CreateEndpoint", "EndpointOperInfo", "Join",
                            "ProgramExternalConnectivity"]
    # the --rm client's endpoint is gone, undone in order; its address given back
    assert allocated(ipam) == {sub: sorted([gw, host_of(sub, 2)])}
    cli(nhost, "rm", "-f", server)
    server_calls = [c["method"].split(".")[1] for c in drv.calls()
                    if (c["body"] or {}).get("EndpointID") == eid]
    assert server_calls[4:] == ["RevokeExternalConnectivity", "Leave", "DeleteEndpoint"]
    assert allocated(ipam) == {sub: [gw]}
    assert net_state(drv)["endpoints"] == {}
    cli(nhost, "network", "rm", "pnw")
    assert methods(drv)[-1] == "DeleteNetwork" and net_state(drv)["networks"] == {}
    assert methods(ipam)[-2:] == ["ReleaseAddress", "ReleasePool"]
    assert allocated(ipam) == {}
    assert links(drv) == []  # its bridge and veths: gone
    assert "pnw" not in cli(nhost, "network", "ls", "--format", "{{.Name}}").split()


def test_builtin_ipam_with_a_plugin_driver_and_an_ipam_plugin_with_a_bridge(
        nhost: str, ndaemon: Daemon, plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "pnet2")
    sub, sub2 = subnet(), subnet()
    ipam = ipam_plugin(plugins, ndaemon, "pipam2", sub2)
    # a plugin driver, the built-in IPAM: svc's pool and addresses, the engines' space
    cli(nhost, "network", "create", "-d", "pnet2", "--subnet", sub, "--aux-address",
        f"router={host_of(sub, 9)}", "pbuiltin")
    [create] = bodies(drv, "CreateNetwork")
    assert create["IPv4Data"] == [{"AddressSpace": "LocalDefault", "Pool": sub,
                                   "Gateway": f"{host_of(sub, 1)}/24",
                                   "AuxAddresses": {"router": f"{host_of(sub, 9)}/24"}}]
    out = cli(nhost, "run", "--rm", "--net", "pbuiltin", "busybox", "ip", "-o", "addr",
              "show", "eth0")
    assert f"inet {host_of(sub, 2)}/24" in out
    # the built-in bridge driver, an IPAM plugin: the bridge holds the plugin's gateway
    cli(nhost, "network", "create", "--ipam-driver", "pipam2", "pbridge")
    shown = json.loads(cli(nhost, "network", "inspect", "pbridge"))[0]
    assert shown["Driver"] == "bridge" and shown["IPAM"]["Driver"] == "pipam2"
    assert shown["IPAM"]["Config"] == [{"Subnet": sub2, "Gateway": host_of(sub2, 1)}]
    out = cli(nhost, "run", "--rm", "--net", "pbridge", "busybox", "sh", "-c",
              f"ip -o addr show eth0; ping -c 1 -W 5 {host_of(sub2, 1)}")
    assert f"inet {host_of(sub2, 2)}/24" in out and "1 packets received" in out
    assert [b["Options"] for b in bodies(ipam, "RequestAddress")] == [
        {"RequestAddressType": "com.docker.network.gateway"}, None]
    assert bodies(ipam, "ReleaseAddress") == [{"PoolID": f"TestLocal/{sub2}",
                                               "Address": host_of(sub2, 2)}]
    # a static address, through the plugin
    out = cli(nhost, "run", "--rm", "--net", "pbridge", "--ip", host_of(sub2, 40), "busybox",
              "ip", "-o", "addr", "show", "eth0")
    assert f"inet {host_of(sub2, 40)}/24" in out
    assert bodies(ipam, "RequestAddress")[-1]["Address"] == host_of(sub2, 40)
    assert allocated(ipam) == {sub2: [host_of(sub2, 1)]}
    cli(nhost, "network", "rm", "pbridge", "pbuiltin")
    assert allocated(ipam) == {} and methods(drv)[-1] == "DeleteNetwork"


def test_live_connect_and_disconnect(nhost: str, ndaemon: Daemon,
                                     plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "pnet3")
    sub = subnet()
    ipam = ipam_plugin(plugins, ndaemon, "pipam3", sub)
    cli(nhost, "network", "create", "-d", "pnet3", "--ipam-driver", "pipam3", "plive")
    cid = cli(nhost, "run", "-d", "busybox", "sleep", "120").strip()
    cli(nhost, "network", "connect", "plive", cid)
    out = cli(nhost, "exec", cid, "sh", "-c", "ip -o addr show eth1; ip route")
    assert f"inet {host_of(sub, 2)}/24" in out
    bridge_gw = inspect(nhost, cid)["NetworkSettings"]["Networks"]["bridge"]["Gateway"]
    # the default bridge keeps the way out: the plugin's gateway is not the default route
    assert f"default via {bridge_gw} dev eth0" in out and "dev eth1" in out
    assert bodies(drv, "ProgramExternalConnectivity") == []
    [ep] = net_state(drv)["endpoints"].values()
    host_end = ep["host"]
    assert host_end in links(drv)
    cli(nhost, "network", "disconnect", "plive", cid)
    assert "eth1" not in cli(nhost, "exec", cid, "ls", "/sys/class/net")
    assert methods(drv)[-2:] == ["Leave", "DeleteEndpoint"]
    assert allocated(ipam) == {sub: [host_of(sub, 1)]}
    # the interface was handed back and the plugin deleted its pair: only its bridge is left
    assert [x for x in links(drv) if "b" not in x[5:]] == []
    assert set(inspect(nhost, cid)["NetworkSettings"]["Networks"]) == {"bridge"}


def test_a_join_without_a_gateway_gets_the_way_out_of_docker_gwbridge(
        nhost: str, ndaemon: Daemon, plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "pnet4", external="none")
    cli(nhost, "network", "create", "-d", "pnet4", "-o", "gateway=none", "pnogw")
    out = cli(nhost, "run", "--rm", "--net", "pnogw", "busybox", "sh", "-c",
              "ls /sys/class/net; ip route")
    gwbridge = json.loads(cli(nhost, "network", "inspect", "docker_gwbridge"))[0]
    gw = gwbridge["IPAM"]["Config"][0]["Gateway"]
    assert "eth0\neth1\nlo" in out and f"default via {gw} dev eth1" in out
    # a plugin without Program/RevokeExternalConnectivity (a 404) is fine: none was due
    assert "Join" in methods(drv) and methods(drv)[-1] == "DeleteEndpoint"
    assert net_state(drv)["endpoints"] == {}


def test_sdk7_and_docker_py(nhost: str, ndaemon: Daemon,
                            plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "pnsdk")
    sub, sub2 = subnet(), subnet()
    ipam = ipam_plugin(plugins, ndaemon, "pisdk", sub, sub2)
    out = run_sdk("sdk7", """
import json, sys, docker
from docker.types import IPAMConfig, IPAMPool
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
n = c.networks.create("sdknet", driver="pnsdk", options={"route": "10.97.0.0/16"},
                      ipam=IPAMConfig(driver="pisdk", pool_configs=[IPAMPool(subnet=sys.argv[2])],
                                      options={"o": "1"}))
print(json.dumps(c.networks.get(n.id).attrs))
print(c.containers.run("busybox", ["sh", "-c", "ip -o addr show eth0; ip route"],
                       network="sdknet", remove=True).decode())
n.remove()
print(json.dumps([x.name for x in c.networks.list()]))
""", nhost, sub)
    attrs = json.loads(out.splitlines()[0])
    assert attrs["Driver"] == "pnsdk" and attrs["IPAM"]["Driver"] == "pisdk"
    assert attrs["IPAM"]["Options"] == {"o": "1"}
    assert f"inet {host_of(sub, 2)}/24" in out
    assert f"10.97.0.0/16 via {host_of(sub, 1)} dev eth0" in out
    assert "sdknet" not in json.loads(out.splitlines()[-1])
    out = run_sdk("dockerpy1", """
import json, sys, docker
from docker.utils import create_ipam_config, create_ipam_pool
c = docker.Client(base_url=sys.argv[1], version="1.23")
n = c.create_network("dpynet", driver="pnsdk", ipam=create_ipam_config(
    driver="pisdk", pool_configs=[create_ipam_pool(subnet=sys.argv[2])]))
print(json.dumps(c.inspect_network(n["Id"])))
ctr = c.create_container("busybox", ["ip", "-o", "addr", "show", "eth0"],
                         host_config=c.create_host_config(network_mode="dpynet"))
c.start(ctr)
print(c.wait(ctr))
print(c.logs(ctr).decode())
print(json.dumps(c.inspect_container(ctr)["NetworkSettings"]["Networks"]))
c.remove_container(ctr)
c.remove_network(n["Id"])
""", nhost, sub2)
    lines = out.splitlines()
    assert json.loads(lines[0])["IPAM"]["Driver"] == "pisdk"
    assert f"inet {host_of(sub2, 2)}/24" in out
    # a stopped container shows no address (its endpoint is undone at the stop)
    assert json.loads(lines[-1])["dpynet"]["IPAddress"] == ""
    assert allocated(ipam) == {} and net_state(drv)["networks"] == {}
    assert links(drv) == []


def test_an_ipam_plugin_that_asks_for_macs(nhost: str, ndaemon: Daemon,
                                           plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "pnmac")
    sub, sub2 = subnet(), subnet()
    ipam = ipam_plugin(plugins, ndaemon, "pimac", sub, sub2, **{"requires-mac": "1"})
    cli(nhost, "network", "create", "-d", "pnmac", "--ipam-driver", "pimac", "--subnet", sub,
        "pmac")
    cli(nhost, "network", "create", "--ipam-driver", "pimac", "--subnet", sub2, "pmacbr")
    with api(ndaemon) as c:  # (the CLI of today sends a MAC per network, from API 1.44)
        for net in ("pmac", "pmacbr"):
            r = c.post("/containers/create", json={
                "Image": "busybox", "Cmd": ["cat", "/sys/class/net/eth0/address"],
                "MacAddress": "02:42:aa:bb:cc:dd", "HostConfig": {"NetworkMode": net}})
            assert r.status_code == 201, r.text
            cid = r.json()["Id"]
            assert c.post(f"/containers/{cid}/start").status_code == 204
            assert c.post(f"/containers/{cid}/wait").json()["StatusCode"] == 0
            assert cli(nhost, "logs", cid) == "02:42:aa:bb:cc:dd\n"
            cli(nhost, "rm", cid)
    # the IPAM plugin got the MAC with each address; the driver got it in the interface and,
    # as the container's own, in the options (a Go net.HardwareAddr: base64)
    macs = [b["Options"] for b in bodies(ipam, "RequestAddress") if b["Options"] and
            "RequestAddressType" not in b["Options"]]
    assert macs == [{"com.docker.network.endpoint.macaddress": "02:42:aa:bb:cc:dd"}] * 2
    [create] = bodies(drv, "CreateEndpoint")
    assert create["Interface"]["MacAddress"] == "02:42:aa:bb:cc:dd"
    assert create["Options"]["com.docker.network.endpoint.macaddress"] == "AkKqu8zd"
    # without a MAC of its own, the container gets one made up for the IPAM plugin
    out = cli(nhost, "run", "--rm", "--net", "pmac", "busybox", "cat",
              "/sys/class/net/eth0/address").strip()
    assert out.startswith("02:42:") and out != "02:42:aa:bb:cc:dd"
    assert bodies(ipam, "RequestAddress")[-1]["Options"] == {
        "com.docker.network.endpoint.macaddress": out}
    assert "com.docker.network.endpoint.macaddress" not in \
        bodies(drv, "CreateEndpoint")[-1]["Options"]
