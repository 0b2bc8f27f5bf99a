"""Field names in request bodies are matched case-insensitively, as the reference engine's Go
decoder matches them: every body, every level (what docker-py 1.10.6 and the SDK send)."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from tests.conftest import run_sdk
from tests.containers.conftest import IMAGE, create, inspect
from tests.containers.test_exec_stats import exec_upgrade
from tests.support.daemon import Daemon, _free_subnet


@pytest.fixture
async def fapi(api: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """``api``, and the networks, volumes and images the tests make removed afterwards."""
    yield api
    for item in (await api.get("/containers/json", params={"all": "1"})).json():
        await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
    await api.delete("/networks/foldnet")
    await api.delete("/volumes/foldvol")
    await api.delete("/images/folded:1")


async def test_create_with_folded_names(fapi: httpx.AsyncClient) -> None:
    r = await fapi.post("/containers/create", json={
        "image": IMAGE, "cmd": ["true"], "labels": {"Key": "v"},
        "HostConfig": {"CpuSetCpus": "0", "memory": 8388608,
                       "restartpolicy": {"name": "on-failure", "maximumretrycount": 2},
                       "portbindings": {"80/tcp": [{"hostport": "18080"}]}}})
    assert r.status_code == 201, r.text
    info = await inspect(fapi, r.json()["Id"])
    hc = info["HostConfig"]
    assert hc["CpusetCpus"] == "0" and hc["Memory"] == 8388608
    assert hc["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 2}
    assert hc["PortBindings"] == {"80/tcp": [{"HostIp": "", "HostPort": "18080"}]}
    assert info["Config"]["Cmd"] == ["true"] and info["Config"]["Labels"] == {"Key": "v"}


async def test_start_update_commit_with_folded_names(fapi: httpx.AsyncClient) -> None:
    cid = (await create(fapi, ["sleep", "300"]))["Id"]
    r = await fapi.post(f"/containers/{cid}/start", json={"memory": 16 << 20})
    assert r.status_code == 204, r.text
    assert (await inspect(fapi, cid))["HostConfig"]["Memory"] == 16 << 20
    r = await fapi.post(f"/containers/{cid}/update", json={
        "cpushares": 512, "restartPolicy": {"name": "unless-stopped"}})
    assert r.status_code == 200, r.text
    hc = (await inspect(fapi, cid))["HostConfig"]
    assert hc["CpuShares"] == 512 and hc["RestartPolicy"]["Name"] == "unless-stopped"
    r = await fapi.post("/commit", params={"container": cid, "repo": "folded", "tag": "1"},
                        json={"cmd": ["echo", "committed"], "labels": {"Key": "v"}})
    assert r.status_code == 201, r.text
    config = (await fapi.get("/images/folded:1/json")).json()["Config"]
    assert config["Cmd"] == ["echo", "committed"] and config["Labels"] == {"Key": "v"}


async def test_exec_create_with_folded_names(cdaemon: Daemon, fapi: httpx.AsyncClient) -> None:
    cid = (await create(fapi, ["sleep", "300"]))["Id"]
    assert (await fapi.post(f"/containers/{cid}/start")).status_code == 204
    r = await fapi.post(f"/containers/{cid}/exec", json={
        "cmd": ["sh"], "attachstdin": True, "attachstdout": True, "tty": True,
        "detachKeys": "ctrl-x"})  # the SDK's spelling
    assert r.status_code == 201, r.text
    eid = r.json()["Id"]
    info = (await fapi.get(f"/exec/{eid}/json")).json()
    assert info["OpenStdout"] and info["OpenStdin"] and info["ProcessConfig"]["tty"]
    s, buf = await exec_upgrade(cdaemon, eid, {"detach": False, "tty": True})
    await s.send_all(b"echo in-$((40+2))\n")
    with trio.fail_after(10):
        while b"in-42" not in buf:
            buf += await s.receive_some()
    await s.send_all(b"\x18")  # ctrl-x: the exec's own detach keys
    with trio.fail_after(10):
        while await s.receive_some():
            pass
    await s.aclose()
    assert (await fapi.get(f"/exec/{eid}/json")).json()["Running"] is True
    r = await fapi.post(f"/containers/{cid}/exec", json={"cmd": ["true"], "detachkeys": "ctrl-"})
    assert r.status_code == 400 and "Invalid escape keys" in r.text


async def test_networks_and_volumes_with_folded_names(fapi: httpx.AsyncClient) -> None:
    sub = str(ipaddress.IPv4Interface(_free_subnet()).network)
    r = await fapi.post("/networks/create", json={
        "name": "foldnet", "checkduplicate": True, "labels": {"Key": "v"},
        "ipam": {"driver": "default", "config": [{"subnet": sub}]}})
    assert r.status_code == 201, r.text
    net = (await fapi.get("/networks/foldnet")).json()
    assert net["Name"] == "foldnet" and net["Labels"] == {"Key": "v"}
    assert net["IPAM"]["Config"][0]["Subnet"] == sub
    cid = (await create(fapi, ["sleep", "300"]))["Id"]
    static = str(ipaddress.IPv4Network(sub)[9])
    r = await fapi.post("/networks/foldnet/connect", json={
        "container": cid, "endpointconfig": {"aliases": ["web"],
                                             "ipamconfig": {"ipv4address": static}}})
    assert r.status_code == 200, r.text
    ep = (await inspect(fapi, cid))["NetworkSettings"]["Networks"]["foldnet"]
    assert ep["Aliases"] == ["web"] and ep["IPAMConfig"] == {"IPv4Address": static}
    r = await fapi.post("/networks/foldnet/disconnect", json={"container": cid, "force": False})
    assert r.status_code == 200, r.text
    assert "foldnet" not in (await inspect(fapi, cid))["NetworkSettings"]["Networks"]
    r = await fapi.post("/volumes/create", json={"name": "foldvol", "labels": {"Key": "v"},
                                                 "driver": "local"})
    assert r.status_code == 201, r.text
    assert r.json()["Name"] == "foldvol" and r.json()["Labels"] == {"Key": "v"}


DOCKERPY1_CPUSET = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
ctr = c.create_container("busybox", ["true"],
                         host_config=c.create_host_config(cpuset_cpus="0", mem_limit="32m"))
out = c.inspect_container(ctr)["HostConfig"]
c.remove_container(ctr)
print(json.dumps(out))
"""


def test_dockerpy1_cpuset_cpus(cdaemon: Daemon) -> None:
    """docker-py 1.10.6 sends ``HostConfig.CpuSetCpus``."""
    hc = json.loads(run_sdk("dockerpy1", DOCKERPY1_CPUSET, cdaemon.url))
    assert hc["CpusetCpus"] == "0" and hc["Memory"] == 32 << 20


async def test_null_for_a_plain_field_is_no_error(api: httpx.AsyncClient) -> None:
    """``"Memory": null`` (a client that sends its unset fields as null) is no 400: Go leaves
    the field at its default."""
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"], "Tty": None,
        "HostConfig": {"Memory": None, "CpuShares": None, "Privileged": None}})
    assert r.status_code == 201, r.text
    hc = (await api.get(f"/containers/{r.json()['Id']}/json")).json()["HostConfig"]
    assert (hc["Memory"], hc["CpuShares"], hc["Privileged"]) == (0, 0, False)
