"""The NetworkDriver and IpamDriver mappers: request bodies as libnetwork 0.7 (Docker 1.11)
sent them, and what answers mean (routes, interfaces, refusals, nonsense)."""

from __future__ import annotations

import json

import pytest

from svc.engine.networks import ipam_api, pools, remote_api
from svc.engine.networks.held import Held, PoolInfo
from svc.engine.networks.ipam import Network
from svc.engine.networks.remote_api import Interface, PoolData, Route
from svc.plugins.client import PluginBadAnswer, PluginCallError, PluginCallNotFound


def test_create_network_body() -> None:
    v4 = PoolData("LocalDefault", "10.1.0.0/16", "10.1.0.1/16", (("router", "10.1.0.2/16"),))
    body = remote_api.create_network("n1", {"k": "v"}, enable_ipv6=False, internal=True,
                                     v4=[v4], v6=[])
    assert json.loads(json.dumps(body)) == {
        "NetworkID": "n1",
        "Options": {"com.docker.network.generic": {"k": "v"},
                    "com.docker.network.enable_ipv6": False,
                    "com.docker.network.internal": True},
        "IPv4Data": [{"AddressSpace": "LocalDefault", "Pool": "10.1.0.0/16",
                      "Gateway": "10.1.0.1/16", "AuxAddresses": {"router": "10.1.0.2/16"}}],
        "IPv6Data": []}
    plain = remote_api.create_network("n2", None, enable_ipv6=True, internal=False,
                                      v4=[PoolData("S", "10.2.0.0/24")], v6=[])
    assert plain["Options"] == {"com.docker.network.generic": {},
                                "com.docker.network.enable_ipv6": True}
    assert plain["IPv4Data"] == [{"AddressSpace": "S", "Pool": "10.2.0.0/24"}]


def test_endpoint_bodies() -> None:
    ports = remote_api.port_options([(80, "tcp"), (53, "udp")],
                                    [("tcp", "", 80, 8080, 8080), ("udp", "127.0.0.1", 53, 0, 0)])
    opts = remote_api.endpoint_options("02:42:ac:11:00:02", ports)
    body = remote_api.create_endpoint("n", "e", Interface("10.0.0.2/24"), opts)
    assert body["Interface"] == {"Address": "10.0.0.2/24", "AddressIPv6": "",
                                 "MacAddress": ""}
    # a net.HardwareAddr in a generic option: Go encoded its bytes as base64
    assert body["Options"]["com.docker.network.endpoint.macaddress"] == "AkKsEQAC"
    assert body["Options"]["com.docker.network.endpoint.exposedports"] == [
        {"Proto": 6, "Port": 80}, {"Proto": 17, "Port": 53}]
    assert body["Options"]["com.docker.network.portmap"] == [
        {"Proto": 6, "IP": "", "Port": 80, "HostIP": "", "HostPort": 8080,
         "HostPortEnd": 8080},
        {"Proto": 17, "IP": "", "Port": 53, "HostIP": "127.0.0.1", "HostPort": 0,
         "HostPortEnd": 0}]
    assert remote_api.endpoint_options("", None) == {}
    assert remote_api.endpoint_only("n", "e") == {"NetworkID": "n", "EndpointID": "e"}
    assert remote_api.join("n", "e", "/proc/1/ns/net", {}) == {
        "NetworkID": "n", "EndpointID": "e", "SandboxKey": "/proc/1/ns/net", "Options": {}}
    assert remote_api.discovery("10.0.0.5", True) == {
        "DiscoveryType": 1, "DiscoveryData": {"Address": "10.0.0.5", "Self": True}}


def test_create_endpoint_answers() -> None:
    given = Interface("10.0.0.2/24")
    parse = remote_api.parse_create_endpoint
    assert parse({}, given) == given
    assert parse({"Interface": None}, given) == given
    assert parse({"Interface": {}}, given) == given
    # the driver supplies what the daemon did not give
    got = parse({"Interface": {"MacAddress": "02:AA:BB:CC:DD:EE",
                               "AddressIPv6": "fd00::5/64"}}, given)
    assert got == Interface("10.0.0.2/24", "fd00::5/64", "02:aa:bb:cc:dd:ee")
    assert parse({"Interface": {"Address": "10.0.0.2/24"}}, given) == given  # an echo
    with pytest.raises(PluginBadAnswer, match="driver modified interface address: the "
                                              "daemon gave 10.0.0.2/24"):
        parse({"Interface": {"Address": "10.0.0.9/24"}}, given)
    with pytest.raises(PluginBadAnswer, match="driver modified interface MAC address"):
        parse({"Interface": {"MacAddress": "02:00:00:00:00:01"}},
              Interface("10.0.0.2/24", mac="02:42:0a:00:00:02"))
    for bad in ({"Interface": {"MacAddress": "zz"}}, {"Interface": {"Address": "10.0.0.9"}},
                {"Interface": "x"}):
        with pytest.raises(PluginBadAnswer):
            parse(bad, given)
    with pytest.raises(PluginCallError, match="NetworkDriver.CreateEndpoint: out of ports"):
        parse({"Err": "out of ports"}, given)


def test_join_answers() -> None:
    got = remote_api.parse_join({
        "InterfaceName": {"SrcName": "veth1c", "DstPrefix": "eth"}, "Gateway": "10.0.0.1",
        "StaticRoutes": [{"Destination": "10.99.1.2/16", "RouteType": 0,
                          "NextHop": "10.0.0.1"},
                         {"Destination": "10.98.0.0/16", "RouteType": 1}],
        "DisableGatewayService": False})
    assert got.src_name == "veth1c" and got.dst_prefix == "eth" and got.gateway == "10.0.0.1"
    # the destination is the network (libnetwork kept the address bits; no kernel takes them)
    assert got.routes == (Route("10.99.0.0/16", 0, "10.0.0.1"), Route("10.98.0.0/16", 1))
    assert got.default_route
    bare = remote_api.parse_join({"InterfaceName": None})
    assert bare.src_name == "" and not bare.default_route and bare.dst_prefix == "eth"
    assert remote_api.parse_join({"InterfaceName": {"SrcName": "x", "DstPrefix": ""}}
                                 ).dst_prefix == "eth"
    assert remote_api.parse_join({"StaticRoutes": [{"Destination": "0.0.0.0/0",
                                                    "NextHop": "10.0.0.1"}]}).default_route
    for doc, words in [
        ({"Gateway": "10.0.0.300"}, 'unable to parse Gateway "10.0.0.300"'),
        ({"GatewayIPv6": "10.0.0.1"}, "is not an IPv6 address"),
        ({"StaticRoutes": [{"Destination": "10.9.0.0/16"}]}, "has no NextHop"),
        ({"StaticRoutes": [{"Destination": "10.9.0.0/16", "NextHop": "x"}]},
         "failed to parse nexthop IP x"),
        ({"StaticRoutes": [{"Destination": "10.9.0.0"}]}, "is not a CIDR"),
        ({"InterfaceName": {"SrcName": "a name too long for linux"}},
         "is not an interface name"),
        ({"InterfaceName": {"SrcName": "ok", "DstPrefix": "eth/"}}, "DstPrefix"),
    ]:
        with pytest.raises(PluginBadAnswer, match=words):
            remote_api.parse_join(doc)


def test_capabilities_scope() -> None:
    assert remote_api.parse_scope({"Scope": "local"}) == "local"
    assert remote_api.parse_scope({"Scope": "global"}) == "global"
    with pytest.raises(PluginBadAnswer, match="invalid capability: expecting 'local' or "
                                              "'global', got 'swarm'"):
        remote_api.parse_scope({"Scope": "swarm"})


def test_ipam_bodies_and_answers() -> None:
    assert ipam_api.request_pool("S", "", "", None, False) == {
        "AddressSpace": "S", "Pool": "", "SubPool": "", "Options": None, "V6": False}
    assert ipam_api.request_address("p", "", ipam_api.gateway_options()) == {
        "PoolID": "p", "Address": "",
        "Options": {"RequestAddressType": "com.docker.network.gateway"}}
    # released by address, without the prefix (libnetwork sent a net.IP)
    assert ipam_api.release_address("p", "10.0.0.5/24") == {"PoolID": "p",
                                                            "Address": "10.0.0.5"}
    pool = ipam_api.parse_pool({"PoolID": "S/10.0.0.0/24", "Pool": "10.0.0.0/24",
                                "Data": {"com.docker.network.gateway": "10.0.0.254/24"}},
                               v6=False)
    assert pool.gateway == "10.0.0.254/24"
    assert ipam_api.parse_address({"Address": "10.0.0.5/24"}, "10.0.0.0/24") == "10.0.0.5/24"
    for doc, words in [({"PoolID": "p", "Pool": "10.0.0.0"}, "not an IPv4 pool"),
                       ({"PoolID": "p", "Pool": "fd00::/64"}, "not an IPv4 pool"),
                       ({"Pool": "10.0.0.0/24"}, "PoolID"),
                       ({"PoolID": "p", "Pool": "10.0.0.0/24",
                         "Data": {"com.docker.network.gateway": "10.9.0.1/24"}},
                        "not in the pool")]:
        with pytest.raises(PluginBadAnswer, match=words):
            ipam_api.parse_pool(doc, v6=False)
    with pytest.raises(PluginBadAnswer, match="not in the pool 10.0.0.0/24"):
        ipam_api.parse_address({"Address": "10.1.0.5/24"}, "10.0.0.0/24")
    with pytest.raises(PluginBadAnswer, match="no Address"):
        ipam_api.parse_address({}, "10.0.0.0/24")
    # a refusal in a 200 answer, under libnetwork's IPAM name for it
    with pytest.raises(PluginCallNotFound, match="IpamDriver.ReleasePool: no such pool"):
        ipam_api.check_error("ReleasePool", {"Error": "no such pool"})
    assert ipam_api.parse_spaces({"LocalDefaultAddressSpace": "L",
                                  "GlobalDefaultAddressSpace": "G"}) == ("L", "G")
    assert ipam_api.parse_capabilities({"RequiresMACAddress": True})


def test_pool_data_of_a_network() -> None:
    net = Network("n", "n", "plug", subnet="10.5.0.0/24", gateway="10.5.0.1",
                  aux={"r": "10.5.0.9"})
    assert pools.pool_data(net, "LocalDefault") == (
        [PoolData("LocalDefault", "10.5.0.0/24", "10.5.0.1/24", (("r", "10.5.0.9/24"),))], [])
    net.pool4 = PoolInfo("S/10.6.0.0/24", "10.6.0.0/24", "10.6.0.1/24", aux={"r": "10.6.0.9/24"})
    v4, v6 = pools.pool_data(net, "S")
    assert v4 == [PoolData("S", "10.6.0.0/24", "10.6.0.1/24", (("r", "10.6.0.9/24"),))]


def test_records_keep_what_plugins_hold() -> None:
    net = Network("n", "pn", "plug", subnet="10.6.0.0/24", gateway="10.6.0.1",
                  ipam_driver="ipam", address_space="S", plugin_scope="local",
                  pool4=PoolInfo("S/10.6.0.0/24", "10.6.0.0/24", "10.6.0.1/24"))
    net.held["e1"] = Held("c1", [("S/10.6.0.0/24", "10.6.0.2/24")], created=True,
                          joined=True)
    again = Network.from_record("n", json.loads(json.dumps(net.record())))
    assert again.held == net.held and again.pool4 == net.pool4
    assert (again.ipam_driver, again.address_space, again.plugin_scope) == ("ipam", "S",
                                                                            "local")
    assert again.plugged and again.with_plugins
    bridge = Network("b", "b", "bridge", subnet="10.7.0.0/24")
    assert "Endpoints" not in bridge.record()  # (records of plain bridges as before)
