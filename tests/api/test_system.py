"""GET/HEAD /_ping, GET /version, GET /info over the socket, with the real CLI and the SDKs."""

from __future__ import annotations

import json
import os
import platform
import re

import httpx

from tests.conftest import docker_cli, run_sdk
from tests.support.daemon import Daemon

COMMON = {"api-version": "1.23", "ostype": "linux", "docker-experimental": "false"}
RFC3339_NANO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$")


def assert_common_headers(resp: httpx.Response) -> None:
    for k, v in COMMON.items():
        assert resp.headers.get(k) == v, (k, resp.headers)
    assert resp.headers["server"].startswith("svc/")


async def test_ping_get_and_head(client: httpx.AsyncClient) -> None:
    for path in ("/_ping", "/v1.23/_ping", "/v1.14/_ping"):
        r = await client.get(path)
        assert r.status_code == 200
        assert r.text == "OK"
        assert r.headers["content-type"] == "text/plain; charset=utf-8"
        assert_common_headers(r)
    h = await client.head("/_ping")
    assert h.status_code == 200 and h.content == b""
    assert_common_headers(h)


async def test_version_reports_real_values(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1.23/version")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert_common_headers(r)
    v = r.json()
    assert v["ApiVersion"] == "1.23"
    assert v["MinAPIVersion"] == "1.14"
    assert v["Os"] == "linux"
    assert v["KernelVersion"] == platform.release()
    assert v["Arch"] == {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(),
                                                                       platform.machine())
    assert RFC3339_NANO.match(v["BuildTime"]), v["BuildTime"]
    assert v["GoVersion"] == f"python{platform.python_version()}"
    assert v["Experimental"] is False
    assert v["Version"] and v["GitCommit"]


async def test_version_shape_per_version(client: httpx.AsyncClient) -> None:
    old = (await client.get("/v1.17/version")).json()
    assert "Os" not in old and "KernelVersion" not in old and "ApiVersion" in old
    assert "Os" in (await client.get("/v1.18/version")).json()


def _meminfo_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


async def test_info_reports_this_machine(client: httpx.AsyncClient, daemon: Daemon) -> None:
    r = await client.get("/info")
    assert r.status_code == 200
    assert_common_headers(r)
    info = r.json()
    assert info["NCPU"] == len(os.sched_getaffinity(0))
    assert info["MemTotal"] == _meminfo_total()
    assert info["KernelVersion"] == platform.release()
    assert info["Architecture"] == platform.machine()
    assert info["OSType"] == "linux"
    assert info["Driver"] == "overlay2" and info["CgroupDriver"] == "cgroupfs"
    assert info["SvcRootDir"] == str(daemon.root) == info["DockerRootDir"]
    assert info["Name"] == platform.node()
    with open("/etc/os-release") as f:
        pretty = next(line for line in f if line.startswith("PRETTY_NAME="))
    assert info["OperatingSystem"] == pretty.split("=", 1)[1].strip().strip('"')
    for key in ("Containers", "ContainersRunning", "ContainersPaused", "ContainersStopped",
                "Images", "NFd", "NGoroutines", "NEventsListener"):
        assert isinstance(info[key], int), key
    assert info["NFd"] > 0 and info["NGoroutines"] > 0
    for key in ("Debug", "IPv4Forwarding", "MemoryLimit", "SwapLimit", "KernelMemory",
                "CpuCfsPeriod", "CpuCfsQuota", "OomKillDisable"):
        assert isinstance(info[key], bool), key
    assert info["MemoryLimit"] == os.path.exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        assert info["IPv4Forwarding"] == (f.read().strip() == "1")
    assert RFC3339_NANO.match(info["SystemTime"])
    assert re.match(r"^([A-Z2-7]{4}:){11}[A-Z2-7]{4}$", info["ID"])
    assert info["RegistryConfig"]["IndexConfigs"]["docker.io"]["Official"] is True


async def test_info_shape_per_version(client: httpx.AsyncClient) -> None:
    v123 = (await client.get("/v1.23/info")).json()
    v122 = (await client.get("/v1.22/info")).json()
    v121 = (await client.get("/v1.21/info")).json()
    v118 = (await client.get("/v1.18/info")).json()
    v115 = (await client.get("/v1.15/info")).json()
    assert "CgroupDriver" in v123 and "KernelMemory" in v123
    assert "CgroupDriver" not in v122 and "KernelMemory" not in v122
    assert "Architecture" in v122 and "Architecture" not in v121
    assert "ContainersRunning" not in v121
    for key in ("Debug", "IPv4Forwarding", "MemoryLimit", "SwapLimit"):
        assert isinstance(v122[key], bool)
        assert type(v118[key]) is int and v118[key] in (0, 1), key
    assert "CpuCfsPeriod" not in v118 and "SystemTime" in v118
    assert "NCPU" not in v115 and "MemTotal" not in v115


async def test_info_survives_a_restart_with_the_same_id(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    from tests.conftest import http_client

    async with http_client(d.sock) as c:
        first = (await c.get("/info")).json()["ID"]
    d.stop()
    d.start()
    async with http_client(d.sock) as c:
        assert (await c.get("/info")).json()["ID"] == first


def test_docker_cli_version_and_info(daemon: Daemon) -> None:
    out = docker_cli(daemon.url, "version", "--format", "{{json .}}")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["Server"]["ApiVersion"] == "1.23"
    assert data["Client"]["ApiVersion"] == "1.23"  # negotiated down through HEAD /_ping
    assert data["Server"]["KernelVersion"] == platform.release()
    plain = docker_cli(daemon.url, "version")
    assert re.search(r"API version:\s+1\.23 \(minimum version 1\.14\)", plain.stdout), plain.stdout

    info = docker_cli(daemon.url, "info", "--format", "{{json .}}")
    assert info.returncode == 0, info.stderr
    data = json.loads(info.stdout)
    assert data["NCPU"] == len(os.sched_getaffinity(0))
    assert data["Driver"] == "overlay2"
    assert data["DockerRootDir"] == str(daemon.root)
    human = docker_cli(daemon.url, "info")
    assert "Storage Driver: overlay2" in human.stdout
    assert "Cgroup Driver: cgroupfs" in human.stdout


SDK7_SCRIPT = """
import json, sys, docker
c = docker.APIClient(base_url=sys.argv[1], version="1.23")
print(json.dumps({"version": c.version(), "info": c.info(), "ping": c.ping()}))
"""

DOCKERPY1_SCRIPT = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
print(json.dumps({"version": c.version(), "info": c.info(), "ping": c.ping()}))
"""


def test_sdk7_version_and_info(daemon: Daemon) -> None:
    data = json.loads(run_sdk("sdk7", SDK7_SCRIPT, daemon.url))
    assert data["version"]["ApiVersion"] == "1.23"
    assert data["info"]["NCPU"] == len(os.sched_getaffinity(0))
    assert data["ping"] is True


def test_sdk7_auto_version(daemon: Daemon) -> None:
    script = ("import sys, docker\nc = docker.DockerClient(base_url=sys.argv[1], version='auto')\n"
              "print(c.api.api_version, c.version()['ApiVersion'])")
    assert run_sdk("sdk7", script, daemon.url).split() == ["1.23", "1.23"]


def test_dockerpy1_version_and_info(daemon: Daemon) -> None:
    data = json.loads(run_sdk("dockerpy1", DOCKERPY1_SCRIPT, daemon.url))
    assert data["version"]["ApiVersion"] == "1.23"
    assert data["info"]["MemTotal"] == _meminfo_total()
    assert data["ping"] in (True, "OK")
