"""update, top, resize, logs and the list/inspect shapes."""

from __future__ import annotations

import json
import time

import httpx
import trio

from svc.runtime.cgroups import CgroupV1
from tests.containers.conftest import create, demux, inspect, output, run
from tests.support.daemon import Daemon


async def started(api: httpx.AsyncClient, cmd: list[str], **fields: object) -> str:
    cid: str = (await create(api, cmd, **fields))["Id"]
    r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 204, r.text
    return cid


async def test_update_applies_live_and_keeps_the_config(api: httpx.AsyncClient,
                                                       cdaemon: Daemon) -> None:
    cid = await started(api, ["sleep", "60"], HostConfig={"Memory": 64 << 20})
    r = await api.post(f"/containers/{cid}/update", json={
        "Memory": 96 << 20, "MemorySwap": 128 << 20, "CpuShares": 256,
        "RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 3}})
    assert r.status_code == 200, r.text
    assert r.json() == {"Warnings": []}
    cg, path = CgroupV1(), f"{cdaemon.cgroup_parent}/{cid}"
    assert int(cg.read("memory", path, "memory.limit_in_bytes")) == 96 << 20
    assert int(cg.read("cpu", path, "cpu.shares")) == 256
    hc = (await inspect(api, cid))["HostConfig"]
    assert (hc["Memory"], hc["CpuShares"]) == (96 << 20, 256)
    assert hc["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}
    r = await api.post(f"/containers/{cid}/update", json={"Memory": 1000})
    assert r.status_code == 400 and "Minimum memory limit allowed is 4MB" in r.text
    r = await api.post("/v1.22/containers/" + cid + "/update",
                       json={"RestartPolicy": {"Name": "always"}})
    assert r.status_code == 200  # RestartPolicy is ignored before v1.23
    assert (await inspect(api, cid))["HostConfig"]["RestartPolicy"]["Name"] == "on-failure"
    assert (await api.post("/containers/nope/update", json={})).status_code == 404


async def test_top_lists_only_the_container_processes(api: httpx.AsyncClient) -> None:
    cid = await started(api, ["sh", "-c", "sleep 61 & sleep 62"])
    await trio.sleep(0.3)
    r = await api.get(f"/containers/{cid}/top")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["Titles"][:3] == ["UID", "PID", "PPID"]
    cmds = [row[-1] for row in body["Processes"]]
    assert any("sleep 61" in c for c in cmds) and any("sleep 62" in c for c in cmds)
    assert len(cmds) == 2  # sh execs its last command
    r = await api.get(f"/containers/{cid}/top", params={"ps_args": "-o pid,comm"})
    assert r.json()["Titles"] == ["PID", "COMMAND"]
    await api.post(f"/containers/{cid}/kill")
    r = await api.get(f"/containers/{cid}/top")
    assert r.status_code == 409 and "is not running" in r.text


async def test_resize_changes_the_tty_size(api: httpx.AsyncClient) -> None:
    script = "trap 'stty size' WINCH; echo ready; while true; do sleep 0.05; done"
    cid = await started(api, ["sh", "-c", script], Tty=True)
    with trio.fail_after(10):
        while "ready" not in (await api.get(f"/containers/{cid}/logs",
                                            params={"stdout": "1"})).text:
            await trio.sleep(0.05)
    r = await api.post(f"/containers/{cid}/resize", params={"h": "33", "w": "101"})
    assert r.status_code == 200
    with trio.fail_after(10):
        while "33 101" not in (await api.get(f"/containers/{cid}/logs",
                                             params={"stdout": "1"})).text:
            await trio.sleep(0.05)
    plain = await started(api, ["sleep", "30"])
    r = await api.post(f"/containers/{plain}/resize", params={"h": "3", "w": "4"})
    assert r.status_code == 400 and "no TTY" in r.text


async def test_logs_tail_since_timestamps_and_streams(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "for i in 1 2 3 4 5; do echo out$i; done; "
                                         "sleep 0.2; echo err >&2"])
    r = await api.get(f"/containers/{cid}/logs", params={"stdout": "1", "stderr": "1",
                                                         "tail": "2"})
    assert r.content == b"\x01\x00\x00\x00\x00\x00\x00\x05out5\n" \
                        b"\x02\x00\x00\x00\x00\x00\x00\x04err\n"
    r = await api.get(f"/containers/{cid}/logs", params={"stderr": "1"})
    assert demux(r.content) == {1: b"", 2: b"err\n"}
    r = await api.get(f"/containers/{cid}/logs", params={"stdout": "1", "timestamps": "1"})
    first = demux(r.content)[1].decode().splitlines()[0]
    stamp, _, text = first.partition(" ")
    assert text == "out1" and stamp.endswith("Z") and len(stamp) == 30
    future = str(int(time.time()) + 100)
    r = await api.get(f"/containers/{cid}/logs", params={"stdout": "1", "since": future})
    assert r.content == b""
    r = await api.get(f"/containers/{cid}/logs")
    assert r.status_code == 400 and "at least one stream" in r.text
    r = await api.get(f"/containers/{cid}/logs", params={"stdout": "1", "tail": "x"})
    assert r.status_code == 400


async def test_logs_follow_ends_when_the_container_stops(api: httpx.AsyncClient) -> None:
    cid = await started(api, ["sh", "-c", "echo a; sleep 1; echo b"])
    got = bytearray()
    with trio.fail_after(15):
        async with api.stream("GET", f"/containers/{cid}/logs",
                              params={"stdout": "1", "follow": "1"}) as r:
            async for chunk in r.aiter_bytes():
                got += chunk
    assert demux(bytes(got))[1] == b"a\nb\n"


async def test_tty_logs_are_raw(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "echo tty"], Tty=True)
    r = await api.get(f"/containers/{cid}/logs", params={"stdout": "1"})
    assert r.content == b"tty\r\n"


async def test_log_rotation_is_readable_across_files(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line$i; "
                                         "i=$((i+1)); done"],
                       HostConfig={"LogConfig": {"Type": "json-file",
                                                 "Config": {"max-size": "10k",
                                                            "max-file": "3"}}})
    info = await inspect(api, cid)
    from pathlib import Path

    log = Path(info["LogPath"])
    assert log.with_name(log.name + ".1").exists() and log.with_name(log.name + ".2").exists()
    assert not log.with_name(log.name + ".3").exists()
    lines = (await output(api, cid)).splitlines()
    assert lines[-1] == "line1999" and 100 < len(lines) < 2000
    assert [int(x[4:]) for x in lines] == list(range(2000 - len(lines), 2000))


async def test_log_driver_none(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["echo", "x"], HostConfig={"LogConfig": {"Type": "none"}})
    r = await api.get(f"/containers/{cid}/logs", params={"stdout": "1"})
    assert r.status_code == 400 and "does not support reading" in r.text
    assert (await inspect(api, cid))["LogPath"] == ""


async def test_list_filters_order_and_shapes(api: httpx.AsyncClient) -> None:
    a = (await create(api, ["true"], name="la", Labels={"tier": "web"}))["Id"]
    b, _ = await run(api, ["sh", "-c", "exit 4"], Labels={"tier": "db"})
    c = await started(api, ["sleep", "60"], ExposedPorts={"80/tcp": {}})

    async def ids(**params: str) -> list[str]:
        r = await api.get("/containers/json", params=params)
        assert r.status_code == 200, r.text
        return [x["Id"] for x in r.json()]

    assert await ids() == [c]
    assert await ids(all="1") == [c, b, a]
    assert await ids(all="1", limit="2") == [c, b]
    assert await ids(limit="1") == [c]
    assert await ids(since=a) == [c, b]
    assert await ids(before=c) == [b, a]
    assert await ids(filters=json.dumps({"status": ["exited"]})) == [b]
    assert await ids(filters=json.dumps({"status": ["created"]})) == [a]
    assert await ids(filters=json.dumps({"exited": ["4"]})) == [b]
    assert await ids(all="1", filters=json.dumps({"label": ["tier=web"]})) == [a]
    assert await ids(all="1", filters=json.dumps({"label": ["tier"]})) == [b, a]
    assert await ids(all="1", filters=json.dumps({"name": ["^la$"]})) == [a]
    assert await ids(all="1", filters=json.dumps({"id": [b[:8]]})) == [b]
    assert set(await ids(all="1", filters=json.dumps({"ancestor": ["busybox"]}))) >= {a, b, c}
    assert await ids(all="1", filters=json.dumps({"ancestor": ["nope"]})) == []
    r = await api.get("/containers/json", params={"filters": json.dumps({"status": ["x"]})})
    assert r.status_code == 400
    r = await api.get("/containers/json", params={"filters": json.dumps({"bogus": ["x"]})})
    assert r.status_code == 400
    entry = (await api.get("/containers/json")).json()[0]
    assert entry["Names"] == [(await inspect(api, c))["Name"]]
    assert entry["Names"][0].startswith("/")
    assert entry["State"] == "running" and entry["Status"].startswith("Up ")
    assert entry["Ports"] == [{"PrivatePort": 80, "Type": "tcp"}]
    assert entry["Command"] == "sleep 60" and entry["Image"] == "busybox:latest"
    assert entry["ImageID"].startswith("sha256:")
    assert "Mounts" in entry and "SizeRw" not in entry
    old = (await api.get("/v1.22/containers/json")).json()[0]
    assert "State" not in old and "Mounts" not in old and "NetworkSettings" in old
    older = (await api.get("/v1.20/containers/json")).json()[0]
    assert "NetworkSettings" not in older and "ImageID" not in older
    sized = (await api.get("/containers/json", params={"size": "1"})).json()[0]
    assert sized["SizeRw"] >= 0 and sized["SizeRootFs"] > sized["SizeRw"]
    exited = [x for x in (await api.get("/containers/json", params={"all": "1"})).json()
              if x["Id"] == b][0]
    assert exited["Status"].startswith("Exited (4) ")


async def test_inspect_shapes_per_version(api: httpx.AsyncClient) -> None:
    cid, _ = await run(api, ["sh", "-c", "echo x > /newfile"])
    info = await inspect(api, cid)
    for key in ("Id", "Created", "Path", "Args", "State", "Image", "ResolvConfPath",
                "HostnamePath", "HostsPath", "LogPath", "Name", "RestartCount", "Driver",
                "MountLabel", "ProcessLabel", "AppArmorProfile", "ExecIDs", "HostConfig",
                "GraphDriver", "Mounts", "Config", "NetworkSettings"):
        assert key in info, key
    assert info["Created"].endswith("Z") and len(info["Created"]) == 30
    assert info["State"]["Dead"] is False and info["State"]["Status"] == "exited"
    assert info["NetworkSettings"]["Networks"].keys() == {"bridge"}
    assert "SizeRw" not in info
    sized = (await api.get(f"/containers/{cid}/json", params={"size": "1"})).json()
    assert sized["SizeRw"] >= 2
    v20 = (await api.get(f"/v1.20/containers/{cid}/json")).json()
    assert "Status" not in v20["State"] and "Dead" not in v20["State"]
    v19 = (await api.get(f"/v1.19/containers/{cid}/json")).json()
    assert v19["Volumes"] == {} and v19["VolumesRW"] == {}
