"""What docker-compose 1.x (through docker-py 1.10.6) sends, at the API versions it speaks
(1.21 for version-1 files, 1.22 for version-2), answered as the engines of that generation
answered it (issue 25)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_sdk
from tests.support.daemon import Daemon

COMPOSE_VERSIONS = ["1.21", "1.22"]

CLIENT = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version=sys.argv[2])
"""


def _dockerpy(d: Daemon, version: str, body: str) -> object:
    out = run_sdk("dockerpy1", CLIENT + body, d.url, version, timeout=90)
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("version", COMPOSE_VERSIONS)
def test_env_entries_without_a_value_are_kept_and_not_passed_on(cdaemon: Daemon,
                                                                 version: str) -> None:
    """compose passes ``environment: [EMPTY]`` as a bare ``EMPTY``: the engines kept it in
    Config.Env and left it (and any default of that name) out of the process."""
    got = _dockerpy(cdaemon, version, """
ctr = c.create_container("busybox", ["env"], environment=["EMPTY", "A=1", "HOSTNAME"])
c.start(ctr)
code = c.wait(ctr)
logs = c.logs(ctr).decode()
env = c.inspect_container(ctr)["Config"]["Env"]
c.remove_container(ctr)
print(json.dumps({"code": code, "logs": logs, "env": env}))
""")
    assert isinstance(got, dict)
    assert got["code"] == 0, got
    lines = got["logs"].splitlines()
    assert "A=1" in lines and not any(x.startswith(("EMPTY", "HOSTNAME")) for x in lines)
    assert "EMPTY" in got["env"] and "HOSTNAME" in got["env"]


def _create(d: Daemon, version: str, body: dict[str, object]) -> dict[str, object]:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                      timeout=30) as c:
        r = c.post(f"/v{version}/containers/create",
                   json={"Image": "busybox", "Cmd": ["true"], **body})
        assert r.status_code == 201, r.text
        cid = r.json()["Id"]
        hc = c.get(f"/v{version}/containers/{cid}/json").json()["HostConfig"]
        c.delete(f"/containers/{cid}", params={"force": "1"})
    return dict(hc)


@pytest.mark.parametrize("version", COMPOSE_VERSIONS)
def test_top_level_limits_fill_what_the_inner_host_config_leaves_at_zero(
        cdaemon: Daemon, version: str) -> None:
    hc = _create(cdaemon, version, {
        "Memory": 64 << 20, "MemorySwap": 128 << 20, "CpuShares": 512, "Cpuset": "0",
        "VolumeDriver": "local", "Privileged": True,  # not one of the merged fields
        "HostConfig": {"Memory": 32 << 20, "Binds": []}})
    assert hc["Memory"] == 32 << 20  # the inner value wins
    assert hc["MemorySwap"] == 128 << 20 and hc["CpuShares"] == 512
    assert hc["CpusetCpus"] == "0" and hc["VolumeDriver"] == "local"
    assert hc["Privileged"] is False


@pytest.mark.parametrize("version", ["1.14", "1.17", *COMPOSE_VERSIONS])
def test_a_body_without_host_config_takes_the_top_level_one_whole(cdaemon: Daemon,
                                                                  version: str) -> None:
    hc = _create(cdaemon, version, {
        "Memory": 64 << 20, "CpuShares": 256, "Cpuset": "0", "Privileged": True,
        "Binds": ["/tmp:/host-tmp:ro"], "Dns": ["127.0.0.53"],
        "PortBindings": {"80/tcp": [{"HostPort": "18080"}]}, "NetworkMode": "none"})
    assert hc["Memory"] == 64 << 20 and hc["CpuShares"] == 256 and hc["CpusetCpus"] == "0"
    assert hc["Privileged"] is True and hc["Binds"] == ["/tmp:/host-tmp:ro"]
    assert hc["Dns"] == ["127.0.0.53"] and hc["NetworkMode"] == "none"
    assert hc["PortBindings"] == {"80/tcp": [{"HostIp": "", "HostPort": "18080"}]}


@pytest.mark.parametrize("version", COMPOSE_VERSIONS)
def test_docker_py_1_limits_reach_the_container(cdaemon: Daemon, version: str) -> None:
    """docker-py 1.10.6 as compose 1.9.0 calls it: cpu_shares and cpuset beside the host
    config, the memory limit in it; the container's cgroup gets them."""
    from svc.runtime.cgroups import CgroupV1

    got = _dockerpy(cdaemon, version, """
hc = c.create_host_config(mem_limit="48m", memswap_limit="96m")
ctr = c.create_container("busybox", ["sleep", "30"], host_config=hc, cpu_shares=300,
                         cpuset="0")
c.start(ctr)
print(json.dumps({"id": ctr["Id"], "hc": c.inspect_container(ctr)["HostConfig"]}))
""")
    assert isinstance(got, dict)
    hc, cid = got["hc"], got["id"]
    try:
        assert hc["Memory"] == 48 << 20 and hc["MemorySwap"] == 96 << 20
        assert hc["CpuShares"] == 300 and hc["CpusetCpus"] == "0"
        cg, path = CgroupV1(), f"{cdaemon.cgroup_parent}/{cid}"
        assert int(cg.read("cpu", path, "cpu.shares")) == 300
        assert int(cg.read("memory", path, "memory.limit_in_bytes")) == 48 << 20
        assert cg.read("cpuset", path, "cpuset.cpus").strip() == "0"
    finally:
        _dockerpy(cdaemon, version, f"""
c.remove_container("{cid}", force=True)
print("{{}}")
""")


@pytest.mark.parametrize("name", ["test 01", "team/backend", "svc:front", "dots.and-dash_"])
def test_network_names_as_the_engines_took_them(cdaemon: Daemon, name: str) -> None:
    """Only a blank name was refused: the docker SDK's own suite makes ``test 01``; the CLI
    and docker-py address them by name, slashes unescaped."""
    from tests.conftest import docker_cli

    created = docker_cli(cdaemon.url, "network", "create", name)
    assert created.returncode == 0, created.stderr
    nid = created.stdout.strip()
    try:
        got = docker_cli(cdaemon.url, "network", "inspect", "-f", "{{.Id}} {{.Name}}", name)
        assert got.stdout.strip() == f"{nid} {name}", got.stderr
        ctr = docker_cli(cdaemon.url, "run", "-d", "--net", name, "busybox", "sleep", "30")
        assert ctr.returncode == 0, ctr.stderr
        cid = ctr.stdout.strip()
        nets = docker_cli(cdaemon.url, "inspect", "-f",
                          "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}", cid)
        assert nets.stdout.strip() == name
        docker_cli(cdaemon.url, "rm", "-f", cid)
        listed = _dockerpy(cdaemon, "1.22", f"""
print(json.dumps([n["Name"] for n in c.networks(names=[{name!r}])]))
""")
        assert listed == [name]
    finally:
        removed = docker_cli(cdaemon.url, "network", "rm", name)
    assert removed.returncode == 0, removed.stderr
    assert docker_cli(cdaemon.url, "network", "inspect", name).returncode != 0


@pytest.mark.parametrize("name, says", [("", "Name is required"),
                                        ("a\nb", "control character")])
def test_blank_and_unprintable_network_names_are_refused(cdaemon: Daemon, name: str,
                                                         says: str) -> None:
    import httpx

    with httpx.Client(transport=httpx.HTTPTransport(uds=str(cdaemon.sock)),
                      base_url="http://svc", timeout=30) as c:
        r = c.post("/v1.22/networks/create", json={"Name": name})
    assert r.status_code == 400 and says in r.text, r.text


@pytest.mark.parametrize("version", COMPOSE_VERSIONS)
def test_commit_of_a_container_never_started(cdaemon: Daemon, version: str) -> None:
    """compose commits on every recreate with an image change: the engines made an image of
    the base, an empty layer and the container's config; its changes are none (null)."""
    got = _dockerpy(cdaemon, version, """
ctr = c.create_container("busybox", ["echo", "committed"], labels={"tier": "web"})
changes = c.diff(ctr)
img = c.commit(ctr, repository="never-started", tag="v" + sys.argv[2].replace(".", ""))
info = c.inspect_image(img["Id"])
base = c.inspect_image("busybox")
c.remove_container(ctr)
print(json.dumps({"changes": changes, "cmd": info["Config"]["Cmd"],
                  "labels": info["Config"]["Labels"], "layers": info["RootFS"]["Layers"],
                  "base": base["RootFS"]["Layers"], "parent": info["Parent"],
                  "base_id": base["Id"]}))
""")
    assert isinstance(got, dict)
    assert got["changes"] is None
    assert got["cmd"] == ["echo", "committed"] and got["labels"] == {"tier": "web"}
    empty = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"
    assert got["layers"] == [*got["base"], empty]
    assert got["parent"] == got["base_id"]


@pytest.mark.parametrize("version", ["1.22"])  # networks: version-2 files, API 1.22
def test_networks_show_what_compose_reads_at_its_versions(cdaemon: Daemon, version: str) -> None:
    """compose 1.9 reads ``Internal`` (``internal: true`` in a version-2 file) and compares the
    whole IPAM object, ``"Options": null`` included, with what it asked for."""
    got = _dockerpy(cdaemon, version, """
from docker.utils import create_ipam_config, create_ipam_pool
ipam = create_ipam_config(pool_configs=[create_ipam_pool(subnet="10.231.7.0/24")])
net = c.create_network("compose_internal_" + sys.argv[2].replace(".", ""), driver="bridge",
                       internal=True, ipam=ipam)
info = c.inspect_network(net["Id"])
c.remove_network(net["Id"])
print(json.dumps(info))
""")
    assert isinstance(got, dict)
    assert got["Internal"] is True and got["EnableIPv6"] is False
    assert got["IPAM"] == {"Driver": "default", "Options": None,
                           "Config": [{"Subnet": "10.231.7.0/24"}]}


def test_kill_and_a_shorter_stop_do_not_wait_behind_a_long_stop(cdaemon: Daemon) -> None:
    """compose's second Ctrl-C kills what its first one is stopping: the engines killed at
    once and the pending stop returned; nothing else queues behind a stop's grace period."""
    import threading
    import time

    import httpx

    def client() -> httpx.Client:
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(cdaemon.sock)),
                            base_url="http://svc/v1.22", timeout=60)

    for second in ("kill", "stop?t=1"):
        with client() as c:
            # PID 1 ignores SIGTERM (no handler): only SIGKILL ends it
            cid = c.post("/containers/create", json={"Image": "busybox",
                                                     "Cmd": ["sleep", "300"]}).json()["Id"]
            assert c.post(f"/containers/{cid}/start").status_code == 204
        first: dict[str, float] = {}

        def long_stop(cid: str = cid, first: dict[str, float] = first) -> None:
            with client() as c:
                r = c.post(f"/containers/{cid}/stop", params={"t": "200"})
                first["status"], first["at"] = r.status_code, time.monotonic()

        waiter = threading.Thread(target=long_stop)
        waiter.start()
        time.sleep(0.5)
        with client() as c:
            start = time.monotonic()
            assert c.get(f"/containers/{cid}/json").json()["State"]["Running"] is True
            assert c.get(f"/containers/{cid}/top").status_code == 200
            assert time.monotonic() - start < 2  # inspect and top answer during the stop
            r = c.post(f"/containers/{cid}/{second}")
            assert r.status_code == 204, r.text
            assert time.monotonic() - start < 5, second
            waiter.join(10)
            assert not waiter.is_alive() and first["status"] == 204
            assert c.get(f"/containers/{cid}/json").json()["State"]["Running"] is False
            c.delete(f"/containers/{cid}", params={"force": "1"})
