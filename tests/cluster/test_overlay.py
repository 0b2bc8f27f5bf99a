"""Overlay networks across three hosts (issue 26, items 4 to 7): created on one host and
listed on every host, containers of different hosts reaching each other by name and address
over VXLAN, --internal, concurrent creates, removal, and what a killed daemon, an absent
store and a cut link leave behind.

Hosts are network namespaces linked by an underlay bridge; etcd runs on the underlay
(``tests/support/hosts.py``); every daemon runs with a 1 s heartbeat and a 3 s TTL."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import docker_cli, run_sdk
from tests.support.daemon import Daemon
from tests.support.hosts import Cluster, cluster


@pytest.fixture(scope="module")
def three() -> Iterator[Cluster]:
    with cluster(3) as c:
        for i in range(3):
            c.start(i)
            c.busybox(i)
        yield c


def cli(d: Daemon, *args: str, ok: bool = True, timeout: float = 120) -> str:
    out = docker_cli(d.url, *args, timeout=timeout)
    if ok:
        assert out.returncode == 0, f"docker {' '.join(args)}: {out.stderr}"
    return out.stdout + out.stderr


def api(d: Daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                        timeout=30)


def wait_for(what: str, check, timeout: float = 15.0) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: not after {timeout}s")
        time.sleep(0.1)
    return time.monotonic() - start


def names_on(d: Daemon, net: str) -> set[str]:
    with api(d) as c:
        r = c.get(f"/v1.22/networks/{net}")
    if r.status_code != 200:
        return set()
    return {v["Name"] for v in r.json()["Containers"].values()}


def rm_all(c: Cluster) -> None:
    for h in c.hosts:
        ids = cli(h.d, "ps", "-aq").split()
        if ids:
            cli(h.d, "rm", "-f", *ids, ok=False)


def pair(c: Cluster, net: str, a: tuple[int, str], b: tuple[int, str]) -> None:
    """Overlay ``net`` made on host ``a``'s, a container on each of the two hosts, and
    ``b``'s known on ``a``'s host."""
    da, db = c.hosts[a[0]].d, c.hosts[b[0]].d
    cli(da, "network", "create", "-d", "overlay", net)
    wait_for("listed", lambda: net in cli(db, "network", "ls"))
    cli(da, "run", "-d", "--name", a[1], "--net", net, "busybox", "sleep", "600")
    cli(db, "run", "-d", "--name", b[1], "--net", net, "busybox", "sleep", "600")
    wait_for(f"{b[1]} known", lambda: b[1] in names_on(da, net))


def test_a_network_made_on_one_host_is_everyones_and_carries_traffic(three: Cluster) -> None:
    d0, d1, d2 = (h.d for h in three.hosts)
    net_id = cli(d0, "network", "create", "-d", "overlay", "--subnet", "10.20.0.0/24",
                 "--label", "team=a", "front").strip()
    try:
        for d in (d1, d2):  # listed everywhere, global
            wait_for("listed", lambda d=d: "front" in cli(d, "network", "ls"))
            got = json.loads(cli(d, "network", "inspect", "front"))[0]
            assert (got["Id"], got["Scope"], got["Driver"]) == (net_id, "global", "overlay")
            assert got["IPAM"]["Config"] == [{"Subnet": "10.20.0.0/24"}]
            assert got["Labels"] == {"team": "a"}
        sdk = run_sdk("sdk7", "import docker, json, sys; c = docker.DockerClient("
                      "base_url=sys.argv[1]); print(json.dumps([(n.name, n.attrs['Scope']) "
                      "for n in c.networks.list(names=['front'])]))", d2.url)
        assert json.loads(sdk) == [["front", "global"]]
        cli(d0, "run", "-d", "--name", "a0", "--net", "front", "busybox", "sleep", "600")
        cli(d1, "run", "-d", "--name", "b1", "--net", "front", "--net-alias", "bee",
            "busybox", "sleep", "600")
        cli(d2, "run", "-d", "--name", "c2", "--net", "front", "busybox", "sleep", "600")
        for d in (d0, d1, d2):
            wait_for("every endpoint known", lambda d=d: names_on(d, "front") ==
                     {"a0", "b1", "c2"})
        # by name, by alias and by address, every host to every other
        assert "0% packet loss" in cli(d0, "exec", "a0", "ping", "-c", "2", "-W", "2", "b1")
        assert "0% packet loss" in cli(d0, "exec", "a0", "ping", "-c", "2", "-W", "2", "bee")
        assert "0% packet loss" in cli(d1, "exec", "b1", "ping", "-c", "2", "-W", "2", "c2")
        addr = json.loads(cli(d0, "inspect", "a0"))[0]["NetworkSettings"]["Networks"][
            "front"]["IPAddress"]
        assert addr.startswith("10.20.0.")
        assert "0% packet loss" in cli(d2, "exec", "c2", "ping", "-c", "2", "-W", "2", addr)
        # the overlay's MTU leaves room for the encapsulation; eth1 is the way out
        links = cli(d0, "exec", "a0", "ip", "-o", "link")
        assert "eth0" in links and "mtu 1450" in links.split("eth0")[1].split("\n")[0]
        assert "default via 172." in cli(d0, "exec", "a0", "ip", "route")
        # TCP both ways: 100 MB checked byte for byte
        # (busybox nc quits at its stdin's end: the servers' stdin never ends)
        cli(d1, "exec", "-d", "b1", "sh", "-c", "sleep 600 | nc -l -p 5000 > /tmp/got")
        time.sleep(0.5)
        sent = cli(d0, "exec", "a0", "sh", "-c", "head -c 100000000 /dev/urandom > /tmp/f && "
                   "nc b1 5000 < /tmp/f && sha256sum /tmp/f").split()[0]
        wait_for("the transfer ends", lambda: sent in cli(d1, "exec", "b1", "sha256sum",
                                                          "/tmp/got", ok=False), timeout=60)
        cli(d0, "exec", "-d", "a0", "sh", "-c", "sleep 600 | nc -l -p 5001 > /tmp/back")
        time.sleep(0.5)
        cli(d1, "exec", "b1", "sh", "-c", "echo hello-from-b1 | nc a0 5001")
        wait_for("the reply", lambda: "hello-from-b1" in cli(d0, "exec", "a0", "cat",
                                                            "/tmp/back", ok=False))
        # removal is refused while any host has an endpoint on it
        refused = cli(d0, "network", "rm", "front", ok=False)
        assert "has active endpoints" in refused and "b1 on 10.250.0.2" in refused
    finally:
        rm_all(three)
    cli(d2, "network", "rm", "front")
    for d in (d0, d1):
        wait_for("gone everywhere", lambda d=d: "front" not in cli(d, "network", "ls"))
    # the sandboxes went with the last container of each host
    left = [n for n in os.listdir("/run/netns") if n.startswith("svo-")
            and n not in three.before]
    assert left == []


def test_an_internal_overlay_has_no_way_out(three: Cluster) -> None:
    d0, d1 = three.hosts[0].d, three.hosts[1].d
    cli(d0, "network", "create", "-d", "overlay", "--internal", "inside")
    try:
        wait_for("listed", lambda: "inside" in cli(d1, "network", "ls"))
        cli(d1, "run", "-d", "--name", "i1", "--net", "inside", "busybox", "sleep", "600")
        cli(d0, "run", "-d", "--name", "i0", "--net", "inside", "busybox", "sleep", "600")
        assert "default" not in cli(d1, "exec", "i1", "ip", "route")
        assert "eth1" not in cli(d1, "exec", "i1", "ip", "-o", "link")
        wait_for("i0 known on host 1", lambda: "i0" in names_on(d1, "inside"))
        assert "0% packet loss" in cli(d1, "exec", "i1", "ping", "-c", "1", "-W", "2", "i0")
    finally:
        rm_all(three)
        cli(d0, "network", "rm", "inside", ok=False)


def test_concurrent_creates_on_two_hosts_never_collide(three: Cluster) -> None:
    d0, d1 = three.hosts[0].d, three.hosts[1].d
    results: dict[str, str] = {}

    def create(d: Daemon, name: str) -> None:
        out = docker_cli(d.url, "network", "create", "-d", "overlay", name)
        results[f"{d.netns}:{name}"] = "ok" if out.returncode == 0 else out.stderr

    threads = [threading.Thread(target=create, args=(d, f"race{i}")) for i in range(6)
               for d in (d0, d1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        for i in range(6):  # each name: one host made it, the other was told it exists
            outcomes = [results[f"{d.netns}:race{i}"] for d in (d0, d1)]
            assert outcomes.count("ok") == 1, outcomes
            assert "already exists" in next(o for o in outcomes if o != "ok")
        with api(d0) as c:
            nets = [n for n in c.get("/networks").json() if n["Name"].startswith("race")]
        subnets = [n["IPAM"]["Config"][0]["Subnet"] for n in nets]
        assert len(nets) == 6 and len(set(subnets)) == 6, subnets
    finally:
        for i in range(6):
            cli(d0, "network", "rm", f"race{i}", ok=False)


def test_without_the_store_containers_stay_connected_and_changes_wait(three: Cluster) -> None:
    assert three.etcd is not None
    d0, d1 = three.hosts[0].d, three.hosts[1].d
    try:
        pair(three, "steady", (0, "s0"), (1, "s1"))
        three.etcd.kill()
        assert "0% packet loss" in cli(d0, "exec", "s0", "ping", "-c", "2", "-W", "2", "s1")
        refused = cli(d0, "network", "create", "-d", "overlay", "later", ok=False)
        assert "cluster store is unreachable" in refused or "etcd unreachable" in refused
        assert cli(d0, "run", "--rm", "busybox", "true", ok=False) == ""  # local work goes on
        three.etcd.start()
        wait_for("the store is back", lambda: "Cluster Store Reachable\", \"true" in
                 json.dumps(api(d0).get("/v1.22/info").json()["SystemStatus"]), timeout=20)
        cli(d0, "run", "-d", "--name", "s2", "--net", "steady", "busybox", "sleep", "600")
        wait_for("s2 known on host 1", lambda: "s2" in names_on(d1, "steady"))
        assert "0% packet loss" in cli(d1, "exec", "s1", "ping", "-c", "1", "-W", "2", "s2")
    finally:
        rm_all(three)
        cli(d0, "network", "rm", "steady", ok=False)


def test_a_killed_host_drops_out_and_reconciles_when_it_restarts(three: Cluster) -> None:
    d0, d2 = three.hosts[0].d, three.hosts[2].d
    try:
        pair(three, "kills", (0, "k0"), (2, "k2"))
        d2.kill()  # SIGKILL: its endpoints stay until the TTL has passed
        took = wait_for("k2 forgotten", lambda: "k2" not in names_on(d0, "kills"), timeout=10)
        assert took <= 3 + 1 + 2
        nslookup = cli(d0, "exec", "k0", "nslookup", "k2", ok=False)
        assert "10.0." not in nslookup.split("Name:")[-1]
        three.start(2)  # its container died with it: nothing of it comes back
        wait_for("host 2 back", lambda: "kills" in cli(d2, "network", "ls"))
        time.sleep(2)
        assert names_on(d0, "kills") == {"k0"}
        cli(d2, "rm", "-f", "k2", ok=False)
        cli(d2, "run", "-d", "--name", "k2b", "--net", "kills", "busybox", "sleep", "600")
        wait_for("k2b known", lambda: "k2b" in names_on(d0, "kills"))
        assert "0% packet loss" in cli(d0, "exec", "k0", "ping", "-c", "1", "-W", "2", "k2b")
    finally:
        rm_all(three)
        cli(d0, "network", "rm", "kills", ok=False)


def test_a_partitioned_host_drops_out_and_comes_back_when_healed(three: Cluster) -> None:
    d0 = three.hosts[0].d
    try:
        pair(three, "parts", (0, "p0"), (1, "p1"))
        three.cut(1)
        wait_for("p1 forgotten while host 1 is cut off",
                 lambda: "p1" not in names_on(d0, "parts"), timeout=10)
        three.heal(1)
        took = wait_for("p1 known again", lambda: "p1" in names_on(d0, "parts"), timeout=20)
        assert took < 20
        assert "0% packet loss" in cli(d0, "exec", "p0", "ping", "-c", "1", "-W", "2", "p1")
    finally:
        rm_all(three)
        cli(d0, "network", "rm", "parts", ok=False)


def test_ports_connect_disconnect_and_docker_py_1(three: Cluster) -> None:
    """docker-py 1.10.6 (compose's client) makes the network; a published port of a
    container on it answers on its host's address; a running container connects to it and
    leaves it."""
    d0, d1 = three.hosts[0].d, three.hosts[1].d
    made = run_sdk("dockerpy1", "import docker, json, sys\n"
                   "c = docker.Client(base_url=sys.argv[1], version='1.22')\n"
                   "n = c.create_network('mixed', driver='overlay')\n"
                   "print(json.dumps(c.inspect_network(n['Id'])))", d0.url)
    assert json.loads(made.strip().splitlines()[-1])["Scope"] == "global"
    try:
        wait_for("listed", lambda: "mixed" in cli(d1, "network", "ls"))
        cli(d1, "run", "-d", "--name", "web", "--net", "mixed", "-p", "8080:80", "busybox",
            "sh", "-c", "mkdir -p /www && echo served-by-web > /www/index.html && "
            "httpd -f -p 80 -h /www")
        host1 = three.hosts[1].address
        got = subprocess.run(["ip", "netns", "exec", three.hosts[0].netns, "curl", "-s", "-m",
                              "5", "--retry", "5", "--retry-connrefused",
                              f"http://{host1}:8080/"], capture_output=True, text=True)
        assert got.stdout.strip() == "served-by-web", got
        # on a user network of its host, so that it asks the embedded DNS (as with the
        # engines, a container of the default bridge keeps its host's resolvers)
        cli(d0, "network", "create", "lnet")
        cli(d0, "run", "-d", "--name", "late", "--net", "lnet", "busybox", "sleep", "600")
        cli(d0, "network", "connect", "mixed", "late")
        wait_for("late known on host 1", lambda: "late" in names_on(d1, "mixed"))
        assert "served-by-web" in cli(d0, "exec", "late", "wget", "-qO-", "http://web/")
        cli(d0, "network", "disconnect", "mixed", "late")
        wait_for("late gone on host 1", lambda: "late" not in names_on(d1, "mixed"))
        assert "eth1" not in cli(d0, "exec", "late", "ip", "-o", "link")
    finally:
        rm_all(three)
        cli(d0, "network", "rm", "mixed", "lnet", ok=False)


def test_first_containers_at_once_and_static_addresses(three: Cluster) -> None:
    """Four containers started at once on a network new to their host share one sandbox
    and one docker_gwbridge; a static address outside the pool is a 400."""
    d0, d1 = three.hosts[0].d, three.hosts[1].d
    cli(d0, "network", "create", "-d", "overlay", "--subnet", "10.30.0.0/24", "burst")
    try:
        wait_for("listed", lambda: "burst" in cli(d1, "network", "ls"))
        outs: list[subprocess.CompletedProcess[str]] = []
        threads = [threading.Thread(target=lambda i=i: outs.append(docker_cli(
            d1.url, "run", "-d", "--name", f"q{i}", "--net", "burst", "busybox", "sleep",
            "600"))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [o.returncode for o in outs] == [0] * 4, [o.stderr for o in outs]
        cli(d0, "run", "-d", "--name", "q9", "--net", "burst", "--ip", "10.30.0.99",
            "busybox", "sleep", "600")
        for i in range(4):
            assert "0% packet loss" in cli(d0, "exec", "q9", "ping", "-c", "1", "-W", "2",
                                           f"q{i}")
        bad = docker_cli(d0.url, "run", "-d", "--net", "burst", "--ip", "10.31.0.5",
                         "busybox", "true")
        assert bad.returncode != 0 and "not a host address of 10.30.0.0/24" in bad.stderr
        taken = docker_cli(d1.url, "run", "-d", "--net", "burst", "--ip", "10.30.0.99",
                           "busybox", "true")
        assert taken.returncode != 0 and "Address already in use" in taken.stderr
    finally:
        rm_all(three)
        cli(d0, "network", "rm", "burst", ok=False)
