"""Daemons join a cluster through etcd: flags, /info, node registration under a lease, and
what happens when a daemon dies or the store is away (issue 26, items 1 and 3).

Hosts are network namespaces linked by an underlay bridge; etcd runs on the underlay
(``tests/support/hosts.py``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trustme

from tests.conftest import docker_cli, run_sdk
from tests.support.daemon import Daemon, running
from tests.support.etcdd import EtcdServer
from tests.support.hosts import Cluster, cluster


@pytest.fixture
def three() -> Iterator[Cluster]:
    with cluster(3) as c:
        yield c


def info(d: Daemon) -> dict[str, object]:
    """/info as a client of this API generation reads it (the CLI 28 shows no cluster
    fields: they left the API at 1.40)."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                      timeout=10) as c:
        r = c.get("/v1.22/info")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def status(d: Daemon) -> dict[str, str]:
    rows = info(d).get("SystemStatus") or []
    return {k: v for k, v in rows}  # type: ignore[misc]


def nodes(d: Daemon) -> list[str]:
    rows = info(d).get("SystemStatus") or []
    return sorted(k.strip() for k, v in rows if v == "registered")  # type: ignore[misc]


def wait_for(what: str, check, timeout: float = 15.0, step: float = 0.1) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``check()`` is true; fails with ``what`` after ``timeout``."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"{what}: not after {timeout}s")
        time.sleep(step)
    return time.monotonic() - start


def test_three_daemons_register_and_info_shows_the_cluster(three: Cluster) -> None:
    for i in range(3):
        three.start(i)
    everyone = sorted(h.advertise for h in three.hosts)
    for h in three.hosts:
        wait_for(f"host {h.index} lists every node", lambda h=h: nodes(h.d) == everyone)
    got = info(three.hosts[0].d)
    assert got["ClusterStore"] == three.store_url
    assert got["ClusterAdvertise"] == three.hosts[0].advertise  # eth0 resolved to its address
    rows = status(three.hosts[0].d)
    assert rows["Cluster Store Reachable"] == "true" and rows["Cluster Nodes"] == "3"
    # the SDK reads the same fields
    sdk = run_sdk("sdk7", "import docker, json, sys; c = docker.DockerClient(base_url=sys.argv[1]);"
                  "i = c.info(); print(json.dumps([i['ClusterStore'], i['ClusterAdvertise']]))",
                  three.hosts[1].d.url)
    assert json.loads(sdk) == [three.store_url, three.hosts[1].advertise]


def test_a_stopped_daemon_leaves_at_once_a_killed_one_after_the_ttl(three: Cluster) -> None:
    for i in range(3):
        three.start(i)
    everyone = sorted(h.advertise for h in three.hosts)
    wait_for("all registered", lambda: nodes(three.hosts[0].d) == everyone)
    assert three.hosts[2].d.stop() == 0  # SIGTERM: the lease is revoked
    took = wait_for("a stopped node drops out", lambda: len(nodes(three.hosts[0].d)) == 2,
                    timeout=5)
    assert took < 2.0
    assert "Traceback" not in three.hosts[2].d.log()
    three.hosts[1].d.kill()  # SIGKILL: nothing revokes; the TTL (3 s) decides
    start = time.monotonic()
    wait_for("a killed node drops out", lambda: len(nodes(three.hosts[0].d)) == 1, timeout=15)
    assert time.monotonic() - start <= 3 + 1 + 1.5  # ttl, one heartbeat, the watch
    # the killed daemon restarts on its root and registers again
    three.start(1)
    wait_for("a restarted node registers", lambda: len(nodes(three.hosts[0].d)) == 2)


def test_a_store_away_at_start_and_later_leaves_local_work_untouched(three: Cluster) -> None:
    assert three.etcd is not None
    three.etcd.kill()
    d = three.start(0)
    wait_for("the daemon says why it is not in the cluster",
             lambda: "etcd unreachable" in status(d).get("Cluster Store Error", ""))
    assert status(d)["Cluster Store Reachable"] == "false"
    assert docker_cli(d.url, "ps").returncode == 0  # local work is served
    assert docker_cli(d.url, "network", "create", "local1").returncode == 0
    three.etcd.start()
    took = wait_for("the daemon joins once the store is back",
                    lambda: status(d).get("Cluster Store Reachable") == "true", timeout=15)
    assert nodes(d) == [three.hosts[0].advertise]
    # the store frozen (a partition looks like this): the daemon notices and says so
    three.etcd.pause()
    try:
        wait_for("the daemon notices the store is away",
                 lambda: status(d).get("Cluster Store Reachable") == "false", timeout=15)
        assert docker_cli(d.url, "network", "inspect", "local1").returncode == 0
    finally:
        three.etcd.resume()
    wait_for("it joins again", lambda: status(d).get("Cluster Store Reachable") == "true",
             timeout=15)
    assert took < 15


@pytest.mark.parametrize("args, says", [
    (["--cluster-store", "consul://10.0.0.1:8500"], "unsupported cluster store 'consul'"),
    (["--cluster-store", "etcd://"], "no etcd address"),
    (["--cluster-store", "etcd://host:99999"], "is not host:port"),
    (["--cluster-advertise", "10.0.0.1:2376"], "must be accompanied by --cluster-store"),
    (["--cluster-store", "etcd://127.0.0.1:1", "--cluster-advertise", "nosuch0:2376"],
     "no interface 'nosuch0'"),
    (["--cluster-store", "etcd://127.0.0.1:1", "--cluster-store-opt", "discovery.ttl=1",
      "--cluster-store-opt", "discovery.heartbeat=5"], "discovery.ttl must be longer"),
    (["--cluster-store", "etcd://127.0.0.1:1", "--cluster-store-opt", "kv.nope=1"],
     "unknown --cluster-store-opt 'kv.nope'"),
])
def test_bad_cluster_flags_are_a_clear_message_and_the_daemon_still_serves(
        args: list[str], says: str) -> None:
    with running(args) as d:
        assert says in d.log()
        rows = status(d)
        assert rows["Cluster Store Reachable"] == "false"
        assert says in rows["Cluster Store Error"]
        assert docker_cli(d.url, "ps").returncode == 0


def test_the_cluster_keys_are_read_from_the_config_file(tmp_path: object) -> None:
    d = Daemon()
    (d.dir / "cfg.json").write_text(json.dumps({
        "cluster-store": "etcd://127.0.0.1:1/team", "cluster-advertise": "127.0.0.1:2376",
        "cluster-store-opts": {"discovery.heartbeat": "1", "discovery.ttl": "3"}}))
    d.args = ["--config-file", str(d.dir / "cfg.json")]
    try:
        d.start()
        got = info(d)
        assert (got["ClusterStore"], got["ClusterAdvertise"]) == ("etcd://127.0.0.1:1/team",
                                                                  "127.0.0.1:2376")
    finally:
        d.cleanup()


def test_the_store_over_tls_with_a_client_certificate(tmp_path: Path) -> None:
    """``kv.cacertfile``, ``kv.certfile`` and ``kv.keyfile``: etcd requires the client
    certificate; without it the daemon says why it is not in the cluster."""
    ca = trustme.CA()
    server, client = ca.issue_cert("127.0.0.1"), ca.issue_cert("svc-node")
    paths = {}
    for name, blob in (("ca.pem", ca.cert_pem.bytes()),
                       ("server.pem", server.cert_chain_pems[0].bytes()),
                       ("server.key", server.private_key_pem.bytes()),
                       ("client.pem", client.cert_chain_pems[0].bytes()),
                       ("client.key", client.private_key_pem.bytes())):
        (tmp_path / name).write_bytes(blob)
        paths[name] = str(tmp_path / name)
    etcd = EtcdServer(tls=(paths["ca.pem"], paths["server.pem"], paths["server.key"])).start()
    try:
        url = f"etcd://{etcd.endpoint}"
        opts = ["--cluster-store-opt", f"kv.cacertfile={paths['ca.pem']}",
                "--cluster-store-opt", "discovery.heartbeat=1",
                "--cluster-store-opt", "discovery.ttl=3"]
        good = ["--cluster-store", url, "--cluster-advertise", "127.0.0.1:7946", *opts,
                "--cluster-store-opt", f"kv.certfile={paths['client.pem']}",
                "--cluster-store-opt", f"kv.keyfile={paths['client.key']}"]
        with running(good) as d:
            wait_for("registered over TLS", lambda: nodes(d) == ["127.0.0.1:7946"])
        with running(["--cluster-store", url, "--cluster-advertise", "127.0.0.1:7946",
                      *opts]) as d:  # no client certificate: etcd refuses the handshake
            wait_for("told why", lambda: "etcd unreachable" in
                     status(d).get("Cluster Store Error", ""))
            assert status(d)["Cluster Store Reachable"] == "false"
    finally:
        etcd.stop()
