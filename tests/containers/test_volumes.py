"""Volumes over the socket: the endpoints, every Binds form, image VOLUMEs filled from the
image, VolumesFrom, HostConfig.Mounts, driver options (tmpfs, a bind of a host directory),
``rm -v``, events; and the CLI and the SDK."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import docker_cli, run_sdk
from tests.containers.conftest import create, inspect, output, run
from tests.support.daemon import Daemon


@pytest.fixture
async def vapi(api: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """``api``, and every volume removed afterwards (containers go first)."""
    yield api
    for item in (await api.get("/containers/json", params={"all": "1"})).json():
        await api.delete(f"/containers/{item['Id']}", params={"force": "1"})
    for v in (await api.get("/volumes")).json()["Volumes"] or []:
        await api.delete(f"/volumes/{v['Name']}")


def _mounted(path: str) -> bool:
    return any(line.split()[4] == path for line in Path("/proc/self/mountinfo").read_text()
               .splitlines())


async def test_volume_endpoints(vapi: httpx.AsyncClient, cdaemon: Daemon) -> None:
    since = time.time()
    r = await vapi.post("/volumes/create", json={"Name": "data1", "Labels": {"k": "v"}})
    assert r.status_code == 201, r.text
    v = r.json()
    assert v == {"Name": "data1", "Driver": "local", "Labels": {"k": "v"},
                 "Mountpoint": str(cdaemon.root / "volumes" / "data1" / "_data")}
    assert Path(v["Mountpoint"]).is_dir()
    assert (await vapi.post("/volumes/create", json={"Name": "data1"})).json() == v  # again
    r = await vapi.post("/v1.22/volumes/create", json={})
    anon = r.json()
    # the same shape at every version (issue 25: no client breaks on a field it did not know)
    assert r.status_code == 201 and len(anon["Name"]) == 64 and anon["Labels"] is None
    assert (await vapi.get("/volumes/data1")).json() == v
    r = await vapi.get("/volumes/nope")
    assert r.status_code == 404 and "no such volume" in r.text
    names = {x["Name"] for x in (await vapi.get("/volumes")).json()["Volumes"]}
    assert names == {"data1", anon["Name"]}
    for bad, status, message in [
        ({"Name": "a b"}, 400, "includes invalid characters for a local volume name"),
        ({"Name": "x", "Driver": "flocker"}, 404,
         "create x: Error looking up volume plugin flocker: plugin not found"),
        ({"Name": "x", "Driver": "d" * 3000}, 404, "plugin not found"),  # no file's name
        ({"DriverOpts": {"size": "1"}}, 400, 'invalid option key: "size"'),
        ({"DriverOpts": {"type": "tmpfs"}}, 400, "need both type and device"),
        ({"DriverOpts": {"type": "none", "device": "/no/such", "o": "bind"}}, 400,
         "not an existing absolute directory"),
    ]:
        r = await vapi.post("/volumes/create", json=bad)
        assert (r.status_code, message in r.text) == (status, True), r.text
    cid = (await create(vapi, ["true"], HostConfig={"Binds": ["data1:/d"]}))["Id"]
    r = await vapi.get("/volumes", params={"filters": json.dumps({"dangling": ["true"]})})
    assert [x["Name"] for x in r.json()["Volumes"]] == [anon["Name"]]
    r = await vapi.get("/volumes", params={"filters": json.dumps({"dangling": ["false"]})})
    assert [x["Name"] for x in r.json()["Volumes"]] == ["data1"]
    # name (a regular expression searched in the name, as dockerd), driver, label
    for filters, names in (({"name": ["ata1"]}, ["data1"]), ({"name": ["^data"]}, ["data1"]),
                           ({"name": ["nomatch"]}, []), ({"driver": ["other"]}, []),
                           ({"driver": ["local"], "name": ["data1"]}, ["data1"])):
        r = await vapi.get("/volumes", params={"filters": json.dumps(filters)})
        assert [x["Name"] for x in r.json()["Volumes"]] == names, filters
    r = await vapi.get("/volumes", params={"filters": json.dumps({"name": ["("]})})
    assert r.status_code == 400 and "invalid filter" in r.text
    r = await vapi.get("/volumes", params={"filters": json.dumps({"color": ["x"]})})
    assert r.status_code == 400
    r = await vapi.delete("/volumes/data1")
    assert r.status_code == 409 and "volume is in use" in r.text and cid in r.text
    assert (await vapi.delete(f"/containers/{cid}")).status_code == 204
    assert (await vapi.delete("/volumes/data1")).status_code == 204
    assert not Path(v["Mountpoint"]).parent.exists()
    assert (await vapi.delete("/volumes/data1")).status_code == 404
    r = await vapi.get("/events", params={"since": str(since), "until": str(time.time() + 1),
                                          "filters": json.dumps({"type": ["volume"]})})
    events = [json.loads(line) for line in r.text.splitlines()]
    assert [(e["Action"], e["Actor"]["ID"]) for e in events if e["Actor"]["ID"] == "data1"] == \
        [("create", "data1"), ("destroy", "data1")]
    assert events[0]["Actor"]["Attributes"] == {"driver": "local"}


async def test_binds_in_every_form(vapi: httpx.AsyncClient, tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "h.txt").write_text("from the host")
    cmd = ["sh", "-c", "echo anon > /anon/a; echo named > /named/n; cat /host/h.txt; "
                       "echo x > /ro/x 2>/dev/null || echo ro-refused"]
    cid, code = await run(vapi, cmd, HostConfig={"Binds": [
        "/anon", "named1:/named:z", f"{host}:/host:ro", "named2:/ro:ro"]})
    assert code == 0 and await output(vapi, cid) == "from the hostro-refused\n"
    mounts = {m["Destination"]: m for m in (await inspect(vapi, cid))["Mounts"]}
    anon, named = mounts["/anon"], mounts["/named"]
    assert len(anon["Name"]) == 64 and anon["Driver"] == "local" and anon["RW"] is True
    assert Path(anon["Source"], "a").read_text() == "anon\n"
    assert named["Name"] == "named1" and named["Mode"] == "z"
    assert Path(named["Source"], "n").read_text() == "named\n"
    assert mounts["/host"] == {"Name": "", "Source": str(host), "Destination": "/host",
                               "Driver": "", "Mode": "ro", "RW": False,
                               "Propagation": "rprivate"}
    assert mounts["/ro"]["RW"] is False
    listed = (await vapi.get("/containers/json", params={
        "all": "1", "filters": json.dumps({"volume": ["named1"]})})).json()
    assert [c["Id"] for c in listed] == [cid] and len(listed[0]["Mounts"]) == 4
    # a second container sees the named volume's data
    cid2, _ = await run(vapi, ["cat", "/n/n"], HostConfig={"Binds": ["named1:/n"]})
    assert await output(vapi, cid2) == "named\n"
    # rm -v removes the anonymous volume only
    assert (await vapi.delete(f"/containers/{cid}", params={"v": "1"})).status_code == 204
    names = {v["Name"] for v in (await vapi.get("/volumes")).json()["Volumes"]}
    assert anon["Name"] not in names and {"named1", "named2"} <= names


async def test_a_new_volume_is_filled_from_the_image(vapi: httpx.AsyncClient) -> None:
    """An image VOLUME (here /etc, set through Config.Volumes) and a new named volume get the
    image's files at that path; nocopy and an already filled volume do not."""
    cid, _ = await run(vapi, ["cat", "/etc/group"], Volumes={"/etc": {}})
    assert "root" in await output(vapi, cid)
    etc = next(m for m in (await inspect(vapi, cid))["Mounts"] if m["Destination"] == "/etc")
    assert etc["Name"] and (Path(etc["Source"]) / "passwd").exists()
    cid, _ = await run(vapi, ["ls", "/etc"], HostConfig={"Binds": ["emptyetc:/etc:nocopy"]})
    # only the mount points of the files svc binds over /etc
    assert (await output(vapi, cid)).split() == ["hostname", "hosts", "resolv.conf"]
    cid, _ = await run(vapi, ["sh", "-c", "rm /etc/group; echo mine > /etc/mine"],
                       HostConfig={"Binds": ["filled:/etc"]})
    cid, _ = await run(vapi, ["ls", "/etc"], HostConfig={"Binds": ["filled:/etc"]})
    assert "group" not in await output(vapi, cid)  # not filled again: it was not empty


async def test_volumes_from_with_modes(vapi: httpx.AsyncClient) -> None:
    src, _ = await run(vapi, ["sh", "-c", "echo shared > /data/f; echo a > /anon/f"],
                       name="vsrc", HostConfig={"Binds": ["shared:/data", "/anon"]})
    cid, code = await run(vapi, ["sh", "-c", "cat /data/f /anon/f; echo x > /data/g || "
                                             "echo refused"],
                          HostConfig={"VolumesFrom": ["vsrc:ro"]})
    assert await output(vapi, cid) == "shared\na\nrefused\n"
    mine = {m["Destination"]: m for m in (await inspect(vapi, cid))["Mounts"]}
    theirs = {m["Destination"]: m for m in (await inspect(vapi, src))["Mounts"]}
    assert mine["/anon"]["Name"] == theirs["/anon"]["Name"] and mine["/anon"]["RW"] is False
    cid, _ = await run(vapi, ["sh", "-c", "echo w > /data/g && cat /data/g"],
                       HostConfig={"VolumesFrom": ["vsrc"]})
    assert await output(vapi, cid) == "w\n"
    r = await vapi.post("/containers/create", json={
        "Image": "busybox", "HostConfig": {"VolumesFrom": ["nosuch"]}})
    assert r.status_code == 404
    # the source container's anonymous volume is in use by the others: rm -v keeps it
    assert (await vapi.delete(f"/containers/{src}", params={"v": "1"})).status_code == 204
    assert (await vapi.get(f"/volumes/{theirs['/anon']['Name']}")).status_code == 200


async def test_hostconfig_mounts(vapi: httpx.AsyncClient, tmp_path: Path) -> None:
    (tmp_path / "b").write_text("bound")
    cid, code = await run(vapi, ["sh", "-c", "grep ' /t ' /proc/mounts; cat /b; "
                                             "ls /etc/passwd /v 2>&1"], HostConfig={"Mounts": [
        {"Type": "tmpfs", "Target": "/t", "TmpfsOptions": {"SizeBytes": 1 << 20}},
        {"Type": "bind", "Source": str(tmp_path / "b"), "Target": "/b", "ReadOnly": True},
        {"Type": "volume", "Source": "mvol", "Target": "/v",
         "VolumeOptions": {"NoCopy": True, "Labels": {"from": "mounts"}}}]})
    out = await output(vapi, cid)
    assert code == 0 and "tmpfs /t tmpfs" in out and "size=1024k" in out and "bound" in out
    assert (await vapi.get("/volumes/mvol")).json()["Labels"] == {"from": "mounts"}
    r = await vapi.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                    "HostConfig": {
        "Binds": ["/tmp:/x"], "Mounts": [{"Type": "tmpfs", "Target": "/x"}]}})
    assert r.status_code == 400 and "Duplicate mount point: /x" in r.text


async def test_driver_options_mount_while_used(vapi: httpx.AsyncClient, tmp_path: Path) -> None:
    r = await vapi.post("/volumes/create", json={"Name": "tmpv", "DriverOpts": {
        "type": "tmpfs", "device": "tmpfs", "o": "size=2m,mode=0777"}})
    assert r.status_code == 201, r.text
    point = r.json()["Mountpoint"]
    cid = (await create(vapi, ["sh", "-c", "grep ' /m ' /proc/mounts; echo hi > /m/f; "
                                           "sleep 30"], HostConfig={"Binds": ["tmpv:/m"]}))["Id"]
    assert (await vapi.post(f"/containers/{cid}/start")).status_code == 204
    assert _mounted(point)
    assert (await vapi.post(f"/containers/{cid}/stop", params={"t": "0"})).status_code == 204
    assert "tmpfs /m tmpfs" in await output(vapi, cid) and "size=2048k" in await output(vapi, cid)
    assert not _mounted(point)  # unmounted after its last user stopped
    shared = tmp_path / "shared"
    shared.mkdir()
    r = await vapi.post("/volumes/create", json={"Name": "bindv", "DriverOpts": {
        "type": "none", "device": str(shared), "o": "bind"}})
    assert r.status_code == 201, r.text
    await run(vapi, ["sh", "-c", "echo through > /s/f"], HostConfig={"Binds": ["bindv:/s"]})
    assert (shared / "f").read_text() == "through\n"
    assert not _mounted(r.json()["Mountpoint"])


async def test_mount_events_and_read_only_archive(vapi: httpx.AsyncClient) -> None:
    since = time.time()
    cid, _ = await run(vapi, ["true"], HostConfig={"Binds": ["evvol:/e:ro"]})
    r = await vapi.get("/events", params={"since": str(since), "until": str(time.time() + 1),
                                          "filters": json.dumps({"volume": ["evvol"]})})
    events = [json.loads(line) for line in r.text.splitlines()]
    assert [e["Action"] for e in events] == ["create", "mount", "unmount"]
    assert events[1]["Actor"]["Attributes"] == {
        "container": cid, "destination": "/e", "driver": "local", "propagation": "",
        "read/write": "false"}
    assert events[2]["Actor"]["Attributes"] == {"container": cid, "driver": "local"}
    r = await vapi.put(f"/containers/{cid}/archive", params={"path": "/e"}, content=b"")
    assert r.status_code == 403 and "read-only" in r.text


def test_cli_volumes(cdaemon: Daemon, host: str) -> None:
    def ok(*args: str) -> str:
        r = docker_cli(host, *args)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert ok("volume", "create", "--name", "clivol").strip() == "clivol"
    assert "clivol" in ok("volume", "ls", "-q").split()
    assert json.loads(ok("volume", "inspect", "clivol"))[0]["Driver"] == "local"
    ok("run", "--name", "w", "-v", "clivol:/data", "busybox", "sh", "-c", "echo cli > /data/f")
    assert ok("run", "--rm", "--volumes-from", "w:ro", "busybox", "cat", "/data/f") == "cli\n"
    assert ok("run", "--rm", "-v", "/anon", "busybox", "ls", "/anon") == ""
    r = docker_cli(host, "volume", "rm", "clivol")
    assert r.returncode != 0 and "in use" in r.stderr
    ok("rm", "w")
    assert ok("volume", "rm", "clivol").strip() == "clivol"
    for name in ok("volume", "ls", "-q").split():
        ok("volume", "rm", name)


SDK_VOLUMES = """
import json, sys, docker
c = docker.APIClient(base_url=sys.argv[1], version="1.23") if hasattr(docker, "APIClient") \\
    else docker.Client(base_url=sys.argv[1], version="1.23")
out = {"create": c.create_volume("sdkvol", driver="local")}
out["inspect"] = c.inspect_volume("sdkvol")
ctr = c.create_container("busybox", ["sh", "-c", "echo v > /v/f; cat /v/f"], volumes=["/v"],
                         host_config=c.create_host_config(binds={"sdkvol": {"bind": "/v",
                                                                           "mode": "rw"}}))
c.start(ctr)
c.wait(ctr)
out["logs"] = c.logs(ctr).decode()
out["mounts"] = c.inspect_container(ctr)["Mounts"]
c.remove_container(ctr, v=True)
out["list"] = [v["Name"] for v in c.volumes()["Volumes"]]
c.remove_volume("sdkvol")
out["after"] = c.volumes()["Volumes"]
print(json.dumps(out))
"""


@pytest.mark.parametrize("sdk", ["sdk7", "dockerpy1"])
def test_sdk_volumes(cdaemon: Daemon, sdk: str) -> None:
    out = json.loads(run_sdk(sdk, SDK_VOLUMES, cdaemon.url))
    assert out["create"]["Name"] == "sdkvol" and out["inspect"]["Driver"] == "local"
    assert out["logs"] == "v\n"
    assert [(m["Name"], m["Destination"]) for m in out["mounts"]] == [("sdkvol", "/v")]
    assert out["list"] == ["sdkvol"] and not out["after"]


async def test_volume_data_dir_is_private(vapi: httpx.AsyncClient, cdaemon: Daemon) -> None:
    """The volumes directory is the daemon's own (0700), like dockerd's."""
    assert (await vapi.post("/volumes/create", json={"Name": "priv"})).status_code == 201
    assert oct(os.stat(cdaemon.root / "volumes").st_mode & 0o777) == oct(0o700)


async def test_hostconfig_tmpfs_is_kept_shown_and_mounted(api: httpx.AsyncClient) -> None:
    cid, code = await run(api, ["sh", "-c", "grep ' /scratch ' /proc/mounts; "
                                            "touch /scratch/x && echo writable"],
                          HostConfig={"Tmpfs": {"/scratch": "rw,size=65536k,mode=700"}},
                          Volumes={"/scratch": {}})
    out = await output(api, cid)
    assert code == 0, out
    line = out.splitlines()[0].split()
    assert line[:3] == ["tmpfs", "/scratch", "tmpfs"], out
    assert {"nosuid", "nodev", "noexec", "size=65536k", "mode=700"} <= set(line[3].split(","))
    assert "writable" in out
    info = (await api.get(f"/containers/{cid}/json")).json()
    assert info["HostConfig"]["Tmpfs"] == {"/scratch": "rw,size=65536k,mode=700"}
    assert info["Mounts"] == []  # the tmpfs took the place of the config Volume
    plain = (await create(api, ["true"]))["Id"]
    assert "Tmpfs" not in (await api.get(f"/containers/{plain}/json")).json()["HostConfig"]
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"], "HostConfig": {"Tmpfs": {"relative": ""}}})
    assert r.status_code == 400 and "tmpfs mount point" in r.text
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"],
        "HostConfig": {"Tmpfs": {"/d": ""}, "Binds": ["/tmp:/d"]}})
    assert r.status_code == 400 and "Duplicate mount point" in r.text


async def test_volume_driver_without_volumes_is_accepted(api: httpx.AsyncClient) -> None:
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"], "HostConfig": {"VolumeDriver": "flocker"}})
    assert r.status_code == 201, r.text
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"], "Volumes": {"/v": {}},
        "HostConfig": {"VolumeDriver": "flocker"}})
    # a 400, not a 404: the CLI takes a 404 from create for a missing image (moby#48772)
    assert r.status_code == 400 and "Error looking up volume plugin flocker: plugin not " \
        "found" in r.text, r.text


async def test_volume_label_filter(api: httpx.AsyncClient) -> None:
    for name, labels in (("lab1", {"tier": "db"}), ("lab2", {"tier": "web"}), ("lab3", {})):
        r = await api.post("/volumes/create", json={"Name": name, "Labels": labels})
        assert r.status_code == 201, r.text
    for label, names in (("tier", ["lab1", "lab2"]), ("tier=db", ["lab1"]), ("x", [])):
        r = await api.get("/volumes", params={"filters": json.dumps({"label": [label],
                                                                     "name": ["^lab"]})})
        assert [v["Name"] for v in r.json()["Volumes"]] == names, label
    for name in ("lab1", "lab2", "lab3"):
        assert (await api.delete(f"/volumes/{name}")).status_code == 204
