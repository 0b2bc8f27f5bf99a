"""Network and IPAM plugins that refuse, hang, crash mid-call or answer garbage: each caller
gets a clear error, the daemon's other requests are served meanwhile, and nothing leaks (no
endpoint, address or interface left in the plugins or on the host). A daemon killed with
SIGKILL while containers run on a plugin network undoes their endpoints at its next start;
plugins of global scope are told of the cluster's nodes."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import httpx
import pytest

from tests.plugins.network_helpers import (
    allocated,
    api,
    bodies,
    cli,
    ipam_plugin,
    links,
    methods,
    net_plugin,
    net_state,
    record,
    subnet,
    wait_for,
)
from tests.plugins.test_network_plugins import host_of
from tests.support.daemon import Daemon, import_busybox
from tests.support.etcdd import running_etcd
from tests.support.plugins.process import PluginProcess

pytestmark = pytest.mark.usefixtures("netlinks")


def nothing_held(drv: PluginProcess, ipam: PluginProcess | None, sub: str) -> bool:
    """No endpoint left in the driver, only the gateway held by the IPAM, no veth left."""
    ok = net_state(drv)["endpoints"] == {} and [x for x in links(drv) if "b" not in x[5:]] == []
    return ok and (ipam is None or allocated(ipam) == {sub: [host_of(sub, 1)]})


def test_unknown_drivers_in_the_engines_words(nhost: str, ndaemon: Daemon,
                                              plugins: list[PluginProcess]) -> None:
    err = cli(nhost, "network", "create", "-d", "nope", "nn", ok=False)
    assert "plugin not found" in err
    err = cli(nhost, "network", "create", "--ipam-driver", "nope", "nn", ok=False)
    assert "plugin not found" in err
    with api(ndaemon) as c:
        r = c.post("/networks/create", json={"Name": "nn", "Driver": "nope"})
        assert r.status_code == 404 and r.text == "plugin not found: network driver nope\n"
        r = c.post("/networks/create", json={"Name": "nn", "IPAM": {"Driver": "nope"}})
        assert r.status_code == 404 and r.text == "plugin not found: IPAM driver nope\n"
    ipam_plugin(plugins, ndaemon, "onlyipam", subnet())
    err = cli(nhost, "network", "create", "-d", "onlyipam", "nn", ok=False)
    assert "Plugin does not implement the requested driver: onlyipam implements " \
           "IpamDriver, not NetworkDriver" in err
    assert "nn" not in cli(nhost, "network", "ls", "--format", "{{.Name}}").split()


def test_refusals_reach_the_user_and_leave_nothing(nhost: str, ndaemon: Daemon,
                                                   plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "prefuse")
    sub = subnet()
    ipam = ipam_plugin(plugins, ndaemon, "pirefuse", sub)
    # CreateNetwork refused: the pool the IPAM gave goes back
    err = cli(nhost, "network", "create", "-d", "prefuse", "--ipam-driver", "pirefuse",
              "-o", "refuse=vlan space exhausted", "pr", ok=False)
    assert "NetworkDriver.CreateNetwork: vlan space exhausted" in err
    assert allocated(ipam) == {} and methods(ipam)[-1] == "ReleasePool"
    # RequestPool refused (in a 200 answer's Error, as libnetwork's IPAM said it)
    creates = len(bodies(drv, "CreateNetwork"))
    err = cli(nhost, "network", "create", "-d", "prefuse", "--ipam-driver", "pirefuse",
              "--ipam-opt", "refuse=no pools for you", "pr", ok=False)
    assert "IpamDriver.RequestPool: no pools for you" in err
    assert len(bodies(drv, "CreateNetwork")) == creates  # the driver was not asked
    # Join refused: the container does not start, its endpoint and address are undone
    cli(nhost, "network", "create", "-d", "prefuse", "--ipam-driver", "pirefuse",
        "-o", "refuse-join=no room on this segment", "pr")
    r = subprocess.run(["docker", "-H", nhost, "run", "--name", "nojoin", "--net", "pr",
                        "busybox", "true"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "NetworkDriver.Join: no room on this segment" in r.stderr
    state = json.loads(cli(nhost, "inspect", "nojoin"))[0]["State"]
    assert not state["Running"] and "NetworkDriver.Join: no room on this segment" in \
        state["Error"]
    assert methods(drv)[-4:] == ["Join", "Leave", "DeleteEndpoint", "GetCapabilities"] or \
        methods(drv)[-3:] == ["Join", "Leave", "DeleteEndpoint"]
    assert nothing_held(drv, ipam, sub) and record(ndaemon, "pr")["Endpoints"] == {}
    cli(nhost, "rm", "nojoin")
    cli(nhost, "network", "rm", "pr")
    # a driver that changes the address it was given: refused, rolled back
    cli(nhost, "network", "create", "-d", "prefuse", "--ipam-driver", "pirefuse",
        "-o", "change-address=1", "pch")
    err = cli(nhost, "run", "--rm", "--net", "pch", "busybox", "true", ok=False)
    assert "NetworkDriver.CreateEndpoint: driver modified interface address: the daemon " \
           f"gave {host_of(sub, 2)}/24, the driver answered 192.0.2.77/24" in err
    assert methods(drv)[-1] == "DeleteEndpoint" and nothing_held(drv, ipam, sub)
    cli(nhost, "network", "rm", "pch")
    # a Join naming an interface that does not exist
    cli(nhost, "network", "create", "-d", "prefuse", "--ipam-driver", "pirefuse",
        "-o", "no-interface=nosuchif0", "pni")
    err = cli(nhost, "run", "--rm", "--net", "pni", "busybox", "true", ok=False)
    assert "failed to add interface nosuchif0 to sandbox" in err
    assert methods(drv)[-2:] == ["Leave", "DeleteEndpoint"]
    assert nothing_held(drv, ipam, sub)
    cli(nhost, "network", "rm", "pni")
    assert allocated(ipam) == {} and net_state(drv)["networks"] == {}


def test_garbage_and_a_crash_mid_call(nhost: str, ndaemon: Daemon,
                                      plugins: list[PluginProcess]) -> None:
    drv = net_plugin(plugins, ndaemon, "pbroken")
    sub = subnet()
    ipam = ipam_plugin(plugins, ndaemon, "pibroken", sub)
    cli(nhost, "network", "create", "-d", "pbroken", "--ipam-driver", "pibroken", "pb")
    drv.faults(NetworkDriver_CreateEndpoint="garbage")
    err = cli(nhost, "run", "--rm", "--net", "pb", "busybox", "true", ok=False)
    assert "NetworkDriver.CreateEndpoint: plugin pbroken answered with something that is " \
           "not JSON: '<html>this is not json'" in err
    assert methods(ipam)[-1] == "ReleaseAddress" and nothing_held(drv, ipam, sub)
    drv.faults(NetworkDriver_Join="crash")
    err = cli(nhost, "run", "--rm", "--net", "pb", "busybox", "true", ok=False)
    assert "NetworkDriver.Join: plugin pbroken went away during the call" in err
    # the plugin may have joined before it died: Leave and DeleteEndpoint are owed, sent
    # once it is back (the address went back to the IPAM plugin after them)
    assert len(record(ndaemon, "pb")["Endpoints"]) == 1
    drv.faults()
    drv.start()
    wait_for(lambda: record(ndaemon, "pb")["Endpoints"] == {}, timeout=20,
             message="the owed undoing")
    assert methods(drv)[-2:] == ["Leave", "DeleteEndpoint"]
    assert nothing_held(drv, ipam, sub)
    # an IPAM that answers garbage
    ipam.faults(IpamDriver_RequestAddress="garbage")
    err = cli(nhost, "run", "--rm", "--net", "pb", "busybox", "true", ok=False)
    assert "IpamDriver.RequestAddress: plugin pibroken answered with something that is " \
           "not JSON" in err
    ipam.faults()
    out = cli(nhost, "run", "--rm", "--net", "pb", "busybox", "ip", "-o", "addr", "show",
              "eth0")  # and all is well again
    assert f"inet {host_of(sub, 2)}/24" in out and nothing_held(drv, ipam, sub)


def test_a_hanging_plugin_holds_up_only_its_callers(spawn, plugins) -> None:  # type: ignore[no-untyped-def]
    from tests.runtime.conftest import skip_reason
    if reason := skip_reason():
        pytest.skip(reason)
    d: Daemon = spawn(["--plugin-timeout", "2"])
    import_busybox(d)
    hang = net_plugin(plugins, d, "phang")
    net_plugin(plugins, d, "pfine")
    sub = subnet()
    ipam = ipam_plugin(plugins, d, "pihang", sub)
    cli(d.url, "network", "create", "-d", "phang", "--ipam-driver", "pihang", "ph")
    cli(d.url, "network", "create", "-d", "pfine", "pf")
    hang.faults(NetworkDriver_Join="hang", NetworkDriver_CreateNetwork="hang")
    t0 = time.monotonic()
    env = {"DOCKER_HOST": d.url, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    run = subprocess.Popen(["docker", "run", "--rm", "--net", "ph", "busybox", "true"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    create = subprocess.Popen(["docker", "network", "create", "-d", "phang", "ph2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env)
    try:
        wait_for(lambda: bodies(hang, "Join") and len(bodies(hang, "CreateNetwork")) == 2,
                 timeout=10, message="the hanging calls")
        for args in (("ps",), ("network", "ls"), ("network", "inspect", "ph"),
                     ("run", "--rm", "--net", "pf", "busybox", "true"),
                     ("network", "create", "-d", "pfine", "pf2"), ("network", "rm", "pf2"),
                     ("run", "--rm", "busybox", "true")):
            t = time.monotonic()
            cli(d.url, *args)
            assert time.monotonic() - t < 1.8, f"docker {' '.join(args)} was held up"
        _, err = run.communicate(timeout=20)
        _, cerr = create.communicate(timeout=20)
    finally:
        run.kill()
        create.kill()
    assert time.monotonic() - t0 < 10
    assert run.returncode != 0 and "NetworkDriver.Join: plugin phang did not answer within " \
                                   "2s" in err, err
    assert create.returncode != 0 and "NetworkDriver.CreateNetwork: plugin phang did not " \
                                      "answer within 2s" in cerr, cerr
    assert "ph2" not in cli(d.url, "network", "ls", "--format", "{{.Name}}").split()
    # the Join's outcome unknown, it was undone: Leave, DeleteEndpoint, ReleaseAddress
    hang.faults()
    wait_for(lambda: record(d, "ph")["Endpoints"] == {}, message="the undoing")
    assert nothing_held(hang, ipam, sub)
    # the create's outcome unknown too: the plugin was told to delete that network again
    wait_for(lambda: len(net_state(hang)["networks"]) == 1, message="DeleteNetwork")
    assert cli(d.url, "ps", "-aq") == ""
    # a removal the plugin does not answer keeps the network, to be tried again
    hang.faults(NetworkDriver_DeleteNetwork="hang")
    err = cli(d.url, "network", "rm", "ph", ok=False)
    assert "NetworkDriver.DeleteNetwork: plugin phang did not answer within 2s" in err
    assert "ph" in cli(d.url, "network", "ls", "--format", "{{.Name}}").split()
    hang.faults()
    cli(d.url, "network", "rm", "ph")
    assert allocated(ipam) == {}


def test_sigkill_with_containers_on_a_plugin_network(spawn, plugins) -> None:  # type: ignore[no-untyped-def]
    from tests.runtime.conftest import skip_reason
    if reason := skip_reason():
        pytest.skip(reason)
    d: Daemon = spawn()
    import_busybox(d)
    drv = net_plugin(plugins, d, "pkill")
    sub = subnet()
    ipam = ipam_plugin(plugins, d, "pikill", sub)
    nid = cli(d.url, "network", "create", "-d", "pkill", "--ipam-driver", "pikill",
              "pk").strip()
    plain = cli(d.url, "run", "-d", "--net", "pk", "busybox", "sleep", "300").strip()
    always = cli(d.url, "run", "-d", "--net", "pk", "--restart", "always", "busybox",
                 "sleep", "300").strip()
    before = net_state(drv)["endpoints"]
    assert len(before) == 2 and all(e["joined"] for e in before.values())
    assert allocated(ipam) == {sub: [host_of(sub, n) for n in (1, 2, 3)]}
    d.kill()
    assert net_state(drv)["endpoints"] == before  # as the crash left them
    d.start()
    # the endpoints the crash left are undone (Leave, DeleteEndpoint, ReleaseAddress); the
    # ``always`` container joins again with an endpoint of its own
    wait_for(lambda: set(before) & set(net_state(drv)["endpoints"]) == set(), timeout=30,
             message=f"the old endpoints undone: {net_state(drv)}")
    for eid in before:
        assert [b["EndpointID"] for b in bodies(drv, "Leave")].count(eid) == 1
        assert [b["EndpointID"] for b in bodies(drv, "DeleteEndpoint")].count(eid) == 1
    assert cli(d.url, "ps", "-q", "--no-trunc").split() == [always]
    [now] = net_state(drv)["endpoints"].values()
    assert now["joined"]
    held = allocated(ipam)[sub]
    assert len(held) == len(set(held)) == 2  # the gateway and the always container's
    assert len(bodies(drv, "CreateNetwork")) == 1  # the network was not made again
    assert json.loads(cli(d.url, "network", "inspect", "pk"))[0]["Id"] == nid
    addr = json.loads(cli(d.url, "inspect", always))[0]["NetworkSettings"]["Networks"]["pk"]
    assert addr["IPAddress"] in held
    assert not json.loads(cli(d.url, "inspect", plain))[0]["State"]["Running"]
    cli(d.url, "rm", "-f", always)
    # killed again, and the plugin is down while the daemon comes back
    cid = cli(d.url, "run", "-d", "--net", "pk", "busybox", "sleep", "300").strip()
    [eid] = net_state(drv)["endpoints"]
    d.kill()
    drv.kill()
    t = time.monotonic()
    d.start()  # not held up by the plugin it owes
    assert time.monotonic() - t < 10
    assert list(record(d, "pk")["Endpoints"]) == [eid]
    wait_for(lambda: "stays owed" in d.log(), timeout=20, message="a failed try, logged")
    drv.start()  # ...and the undoing is sent again until the plugin answers
    wait_for(lambda: record(d, "pk")["Endpoints"] == {}, timeout=30, message="the undoing")
    assert net_state(drv)["endpoints"] == {} and allocated(ipam) == {sub: [host_of(sub, 1)]}
    assert [x for x in links(drv) if "b" not in x[5:]] == []
    assert not json.loads(cli(d.url, "inspect", cid))[0]["State"]["Running"]


def test_global_plugins_are_told_of_the_nodes(spawn, plugins) -> None:  # type: ignore[no-untyped-def]
    with running_etcd() as etcd:
        d: Daemon = spawn(["--cluster-store", f"etcd://{etcd.endpoint}",
                           "--cluster-advertise", "127.0.0.1:2376"])
        drv = net_plugin(plugins, d, "pglobal", scope="global")
        local = net_plugin(plugins, d, "plocal")
        cli(d.url, "network", "create", "-d", "pglobal", "pg")
        cli(d.url, "network", "create", "-d", "plocal", "pl")
        assert json.loads(cli(d.url, "network", "inspect", "pg"))[0]["Scope"] == "global"
        wait_for(lambda: net_state(drv)["nodes"], message="DiscoverNew")
        assert net_state(drv)["nodes"] == [[True, {"DiscoveryType": 1, "DiscoveryData": {
            "Address": "127.0.0.1", "Self": True}}]]
        key = base64.b64encode(b"/svc/nodes/10.9.9.9:2376").decode()
        value = base64.b64encode(json.dumps({"Addr": "10.9.9.9:2376"}).encode()).decode()
        httpx.post(f"http://{etcd.endpoint}/v3/kv/put", json={"key": key, "value": value})
        wait_for(lambda: len(net_state(drv)["nodes"]) == 2, message="a node joins")
        httpx.post(f"http://{etcd.endpoint}/v3/kv/deleterange", json={"key": key})
        wait_for(lambda: len(net_state(drv)["nodes"]) == 3, message="a node leaves")
        assert net_state(drv)["nodes"][1:] == [
            [True, {"DiscoveryType": 1, "DiscoveryData": {"Address": "10.9.9.9",
                                                          "Self": False}}],
            [False, {"DiscoveryType": 1, "DiscoveryData": {"Address": "10.9.9.9",
                                                           "Self": False}}]]
        assert net_state(local)["nodes"] == []  # (libnetwork: global drivers only)
        cli(d.url, "network", "rm", "pg", "pl")
        d.stop()
