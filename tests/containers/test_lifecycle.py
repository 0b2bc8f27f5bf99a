"""Create, start, stop, kill, wait, pause, rename, remove over the socket: codes, states,
messages, events."""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
import trio

from tests.containers.conftest import create, inspect, output, run
from tests.support.daemon import Daemon


async def test_run_true_and_false_and_output(api: httpx.AsyncClient) -> None:
    cid, code = await run(api, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert code == 3
    assert await output(api, cid) == "out\n"
    assert await output(api, cid, stderr=True) == "err\n"
    info = await inspect(api, cid)
    st = info["State"]
    assert (st["Status"], st["Running"], st["ExitCode"], st["Pid"]) == ("exited", False, 3, 0)
    assert st["StartedAt"] <= st["FinishedAt"] and st["FinishedAt"].endswith("Z")
    assert info["Path"] == "sh" and info["Args"] == ["-c", "echo out; echo err >&2; exit 3"]
    assert (await run(api, ["true"]))[1] == 0


async def test_create_errors(api: httpx.AsyncClient) -> None:
    r = await api.post("/containers/create", json={"Image": "nope:1", "Cmd": ["true"]})
    assert r.status_code == 404 and "No such image: nope:1" in r.text
    r = await api.post("/containers/create", json={"Image": "busybox"})
    assert r.status_code == 400 and "No command specified" in r.text
    await create(api, ["true"], name="taken")
    r = await api.post("/containers/create", params={"name": "taken"},
                       json={"Image": "busybox", "Cmd": ["true"]})
    assert r.status_code == 409 and 'The name "/taken" is already in use' in r.text
    r = await api.post("/containers/create", params={"name": "bad name!"},
                       json={"Image": "busybox", "Cmd": ["true"]})
    assert r.status_code == 400 and "Invalid container name" in r.text
    r = await api.post("/containers/create", content=b"{nope",
                       headers={"Content-Type": "application/json"})
    assert r.status_code == 400


@pytest.mark.parametrize("hc, message", [
    ({"Memory": 1024}, "Minimum memory limit allowed is 4MB"),
    ({"Memory": 8 << 20, "MemorySwap": 4 << 20}, "Minimum memoryswap limit should be larger"),
    ({"MemorySwap": 8 << 20}, "always set the Memory limit when using Memoryswap"),
    ({"MemorySwappiness": 101}, "valid memory swappiness range is 0-100"),
    ({"KernelMemory": 1 << 20}, "Minimum kernel memory limit allowed is 4MB"),
    ({"BlkioWeight": 5}, "Range of blkio weight is from 10 to 1000"),
    ({"CpuPeriod": 10}, "CPU cfs period can not be less than 1ms"),
    ({"CpuQuota": 10}, "CPU cfs quota can not be less than 1ms"),
    ({"OomScoreAdj": 1001}, "range for oom score adj is [-1000, 1000]"),
    ({"ShmSize": -1}, "SHM size must be greater then 0"),
    ({"CpusetCpus": "0-999"}, "Requested CPUs are not available"),
    ({"RestartPolicy": {"Name": "sometimes"}}, "invalid restart policy sometimes"),
    ({"RestartPolicy": {"Name": "always", "MaximumRetryCount": 2}},
     "maximum restart count not valid with restart policy"),
    ({"LogConfig": {"Type": "nolog"}}, "no log driver named 'nolog'"),
    ({"LogConfig": {"Type": "awslogs"}}, "awslogs logging driver is not available"),
    ({"LogConfig": {"Type": "syslog", "Config": {"syslog-format": "x"}}}, "syslog-format"),
    ({"LogConfig": {"Type": "json-file", "Config": {"max-size": "x"}}},
     "LogConfig (json-file): invalid size: 'x'"),
    ({"Ulimits": [{"Name": "nofile", "Soft": 10, "Hard": 5}]}, "soft limit must be less"),
    ({"Ulimits": [{"Name": "bogus", "Soft": 1, "Hard": 1}]}, "Invalid ulimit type: bogus"),
    ({"Binds": ["bad name!:/x"]}, "includes invalid characters for a local volume name"),
    ({"Binds": ["/tmp:/x:zz"]}, "invalid mode: 'zz'"),
    ({"Binds": ["/tmp:/x:ro,rw"]}, "ro and rw exclude each other"),
    ({"Binds": ["/tmp:relative"]}, "the container path must be absolute"),
    ({"Binds": ["/tmp:/x", "/var:/x"]}, "Duplicate mount point: /x"),
    ({"Mounts": [{"Type": "bind", "Source": "/no/such/dir", "Target": "/x"}]},
     "bind source path does not exist"),
    ({"Mounts": [{"Type": "nfs", "Target": "/x"}]}, "Type must be bind, volume or tmpfs"),
    ({"VolumesFrom": ["ctr:rx"]}, "invalid VolumesFrom entry"),
    ({"ExtraHosts": ["host:notanip"]}, "invalid IP address in add-host"),
    ({"Dns": ["x.y"]}, "x.y is not an ip address"),
    ({"CapAdd": ["CAP_NOPE"]}, "Unknown capability"),
])
async def test_limits_are_400_naming_the_field(api: httpx.AsyncClient, hc: dict[str, object],
                                               message: str) -> None:
    before = len((await api.get("/containers/json", params={"all": "1"})).json())
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "HostConfig": hc})
    if r.status_code == 201:  # some checks happen at start (capabilities)
        cid = r.json()["Id"]
        r = await api.post(f"/containers/{cid}/start")
    assert r.status_code == 400, r.text
    assert message in r.text
    if r.request.url.path.endswith("/create"):
        assert len((await api.get("/containers/json", params={"all": "1"})).json()) == before


async def test_network_mode_unknown_is_404(api: httpx.AsyncClient) -> None:
    r = await api.post("/containers/create", json={"Image": "busybox", "Cmd": ["true"],
                                                   "HostConfig": {"NetworkMode": "nonet"}})
    assert r.status_code == 404 and "network nonet not found" in r.text


async def test_start_stop_codes_and_states(api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sleep", "300"], name="sleeper"))["Id"]
    assert (await inspect(api, "sleeper"))["State"]["Status"] == "created"
    assert (await api.post(f"/containers/{cid}/stop")).status_code == 304
    assert (await api.post("/containers/sleeper/start")).status_code == 204
    r = await api.post("/containers/sleeper/start")
    assert r.status_code == 304
    info = await inspect(api, cid[:10])
    assert info["State"]["Running"] and info["State"]["Pid"] > 0
    assert os.path.exists(f"/proc/{info['State']['Pid']}")
    # pause / unpause
    assert (await api.post(f"/containers/{cid}/unpause")).status_code == 409
    assert (await api.post(f"/containers/{cid}/pause")).status_code == 204
    st = (await inspect(api, cid))["State"]
    assert (st["Status"], st["Paused"], st["Running"]) == ("paused", True, True)
    assert (await api.post(f"/containers/{cid}/pause")).status_code == 409
    r = await api.delete(f"/containers/{cid}")
    assert r.status_code == 409 and "You cannot remove a paused container" in r.text
    assert (await api.post(f"/containers/{cid}/unpause")).status_code == 204
    # stop: sleep as pid 1 ignores SIGTERM, so t=1 ends in SIGKILL
    t0 = time.monotonic()
    assert (await api.post(f"/containers/{cid}/stop", params={"t": "1"})).status_code == 204
    assert 0.9 < time.monotonic() - t0 < 10
    st = (await inspect(api, cid))["State"]
    assert (st["Status"], st["ExitCode"]) == ("exited", 137)
    assert (await api.post(f"/containers/{cid}/stop")).status_code == 304
    assert (await api.post(f"/containers/{cid}/kill")).status_code == 409
    # start again after exit
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    assert (await inspect(api, cid))["State"]["Status"] == "running"
    r = await api.delete(f"/containers/{cid}")
    assert r.status_code == 409 and "You cannot remove a running container" in r.text
    assert (await api.delete(f"/containers/{cid}", params={"force": "1"})).status_code == 204
    assert (await api.get(f"/containers/{cid}/json")).status_code == 404


async def test_stop_signal_is_honoured(api: httpx.AsyncClient) -> None:
    script = "trap 'echo got-usr1; exit 5' USR1; while true; do sleep 0.1; done"
    cid = (await create(api, ["sh", "-c", script], StopSignal="SIGUSR1"))["Id"]
    await api.post(f"/containers/{cid}/start")
    await trio.sleep(0.3)
    assert (await api.post(f"/containers/{cid}/stop", params={"t": "10"})).status_code == 204
    st = (await inspect(api, cid))["State"]
    assert st["ExitCode"] == 5
    assert "got-usr1" in await output(api, cid)


async def test_kill_with_signal_name_and_number(api: httpx.AsyncClient) -> None:
    script = "trap 'echo hup' HUP; trap 'exit 9' TERM; while true; do sleep 0.1; done"
    cid = (await create(api, ["sh", "-c", script]))["Id"]
    await api.post(f"/containers/{cid}/start")
    await trio.sleep(0.3)
    assert (await api.post(f"/containers/{cid}/kill", params={"signal": "HUP"})).status_code \
        == 204
    await trio.sleep(0.3)
    assert (await inspect(api, cid))["State"]["Running"]
    r = await api.post(f"/containers/{cid}/kill", params={"signal": "NOPE"})
    assert r.status_code == 400 and "Invalid signal: NOPE" in r.text
    assert (await api.post(f"/containers/{cid}/kill", params={"signal": "15"})).status_code \
        == 204
    with trio.fail_after(10):
        assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 9}
    assert "hup" in await output(api, cid)


async def test_sigkill_waits_for_the_exit(api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sleep", "300"]))["Id"]
    await api.post(f"/containers/{cid}/start")
    assert (await api.post(f"/containers/{cid}/kill")).status_code == 204
    st = (await inspect(api, cid))["State"]  # no wait needed: kill returned after the exit
    assert (st["Status"], st["ExitCode"]) == ("exited", 137)


async def test_wait_sends_headers_at_once(cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    from tests.support.http import connect, header, read_head

    cid = (await create(api, ["sleep", "1"]))["Id"]
    await api.post(f"/containers/{cid}/start")
    s = await connect(cdaemon.sock)
    await s.send_all(f"POST /containers/{cid}/wait HTTP/1.1\r\nHost: svc\r\n\r\n".encode())
    buf = bytearray()
    with trio.fail_after(0.8):  # well before the container exits
        head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 200")
    with trio.fail_after(10):
        while b"StatusCode" not in buf:
            buf += await s.receive_some()
    assert b'{"StatusCode":0}' in buf
    assert header(head, "Connection") is None
    # the connection stays open for the next request, as dockerd's does
    while not buf.endswith(b"0\r\n\r\n"):
        buf += await s.receive_some()
    await s.send_all(b"GET /_ping HTTP/1.1\r\nHost: svc\r\n\r\n")
    buf = bytearray()
    with trio.fail_after(5):
        assert (await read_head(s, buf)).startswith(b"HTTP/1.1 200")
    await s.aclose()


async def test_rename(api: httpx.AsyncClient) -> None:
    a = (await create(api, ["true"], name="first"))["Id"]
    await create(api, ["true"], name="second")
    r = await api.post("/containers/first/rename", params={"name": "second"})
    assert r.status_code == 409
    assert (await api.post("/containers/first/rename", params={"name": "third"})).status_code \
        == 204
    assert (await inspect(api, "third"))["Id"] == a
    assert (await api.get("/containers/first/json")).status_code == 404
    r = await api.post("/containers/nope/rename", params={"name": "x"})
    assert r.status_code == 404


async def test_ambiguous_prefix_and_unknown(api: httpx.AsyncClient) -> None:
    ids = [(await create(api, ["true"]))["Id"] for _ in range(20)]
    firsts = {}
    for cid in ids:
        firsts.setdefault(cid[0], []).append(cid)
    shared = next(v for v in firsts.values() if len(v) > 1)
    r = await api.get(f"/containers/{shared[0][0]}/json")
    assert r.status_code == 400 and "multiple IDs found" in r.text
    assert (await api.get("/containers/zzzz/json")).status_code == 404


async def test_restart_policy_on_failure_counts_retries(api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sh", "-c", "exit 2"],
                        HostConfig={"RestartPolicy": {"Name": "on-failure",
                                                      "MaximumRetryCount": 2}}))["Id"]
    await api.post(f"/containers/{cid}/start")
    with trio.fail_after(20):
        while True:
            info = await inspect(api, cid)
            if info["RestartCount"] == 2 and info["State"]["Status"] == "exited":
                break
            await trio.sleep(0.05)
    assert info["State"]["ExitCode"] == 2
    assert len(await output(api, cid)) == 0


async def test_restart_policy_always_and_manual_stop(api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["sh", "-c", "sleep 0.2"],
                        HostConfig={"RestartPolicy": {"Name": "always"}}))["Id"]
    await api.post(f"/containers/{cid}/start")
    with trio.fail_after(20):
        while (await inspect(api, cid))["RestartCount"] < 2:
            await trio.sleep(0.05)
    assert (await api.post(f"/containers/{cid}/stop", params={"t": "1"})).status_code == 204
    count = (await inspect(api, cid))["RestartCount"]
    await trio.sleep(1.0)
    info = await inspect(api, cid)
    assert info["State"]["Status"] == "exited" and info["RestartCount"] == count


async def test_wait_returns_at_the_next_exit_with_on_failure(api: httpx.AsyncClient) -> None:
    """dockerd's wait returns at each exit of a container with a restart policy, not when
    it stops for good (the retries take 3.1 s of back-off alone here)."""
    cid = (await create(api, ["sh", "-c", "exit 3"],
                        HostConfig={"RestartPolicy": {"Name": "on-failure",
                                                      "MaximumRetryCount": 5}}))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    t0 = trio.current_time()
    with trio.fail_after(20):
        r = await api.post(f"/containers/{cid}/wait")
    assert r.json() == {"StatusCode": 3}
    assert trio.current_time() - t0 < 3.0
    assert (await inspect(api, cid))["RestartCount"] < 5  # it returned at the first exits
    with trio.fail_after(20):  # and again at the next one, from the restart loop
        assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 3}


async def test_wait_returns_at_the_next_exit_with_always(api: httpx.AsyncClient) -> None:
    for policy in ("always", "unless-stopped"):
        cid = (await create(api, ["sh", "-c", "sleep 0.2; exit 3"],
                            HostConfig={"RestartPolicy": {"Name": policy}}))["Id"]
        assert (await api.post(f"/containers/{cid}/start")).status_code == 204
        for _ in range(2):
            with trio.fail_after(10):
                r = await api.post(f"/containers/{cid}/wait")
            assert r.json() == {"StatusCode": 3}, policy
        assert (await inspect(api, cid))["State"]["Status"] in ("running", "restarting")
        await api.delete(f"/containers/{cid}", params={"force": "1"})


async def test_container_events(api: httpx.AsyncClient) -> None:
    since = str(time.time() - 1)
    cid, _ = await run(api, ["true"], Labels={"team": "a"})
    await api.delete(f"/containers/{cid}")
    r = await api.get("/events", params={"since": since, "until": str(time.time() + 1),
                                         "filters": json.dumps({"container": [cid]})})
    evs = [json.loads(x) for x in r.text.splitlines()]
    assert [e["Action"] for e in evs] == ["create", "start", "die", "destroy"]
    die = evs[2]
    assert die["Actor"]["Attributes"]["exitCode"] == "0"
    assert die["Actor"]["Attributes"]["team"] == "a"
    assert die["Actor"]["Attributes"]["image"] == "busybox:latest"
    assert die["from"] == "busybox:latest" and die["status"] == "die"


async def test_auto_remove(api: httpx.AsyncClient) -> None:
    """HostConfig.AutoRemove (v1.25's field, honoured when a client sends it)."""
    cid = (await create(api, ["true"], HostConfig={"AutoRemove": True}))["Id"]
    await api.post(f"/containers/{cid}/start")
    with trio.fail_after(10):
        while (await api.get(f"/containers/{cid}/json")).status_code != 404:
            await trio.sleep(0.05)
    r = await api.post("/containers/create", json={
        "Image": "busybox", "Cmd": ["true"],
        "HostConfig": {"AutoRemove": True, "RestartPolicy": {"Name": "always"}}})
    assert r.status_code == 400 and "AutoRemove" in r.text


async def test_start_takes_an_empty_or_chunked_empty_body_and_old_host_config(
        cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    from tests.support.http import connect, read_head

    cid = (await create(api, ["true"]))["Id"]
    s = await connect(cdaemon.sock)
    await s.send_all(f"POST /containers/{cid}/start HTTP/1.1\r\nHost: svc\r\n"
                     "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "0\r\n\r\n".encode())
    head = await read_head(s, bytearray())
    assert head.startswith(b"HTTP/1.1 204")
    await s.aclose()
    # v1.21 clients send HostConfig with start: applied before the first start
    cid = (await create(api, ["hostname"]))["Id"]
    r = await api.post(f"/v1.21/containers/{cid}/start",
                       json={"Memory": 32 << 20, "ExtraHosts": ["x:10.0.0.1"]})
    assert r.status_code == 204, r.text
    info = await inspect(api, cid)
    assert info["HostConfig"]["Memory"] == 32 << 20
    assert info["HostConfig"]["ExtraHosts"] == ["x:10.0.0.1"]


async def test_wait_is_cancelled_when_the_client_goes(cdaemon: Daemon,
                                                      api: httpx.AsyncClient) -> None:
    from tests.support.http import connect, read_head

    cid = (await create(api, ["sleep", "30"]))["Id"]
    await api.post(f"/containers/{cid}/start")
    for _ in range(5):
        s = await connect(cdaemon.sock)
        await s.send_all(f"POST /containers/{cid}/wait HTTP/1.1\r\nHost: svc\r\n\r\n".encode())
        await read_head(s, bytearray())
        await s.aclose()
    await trio.sleep(0.2)
    # the daemon is unaffected and the container still runs; a new wait still works
    assert (await inspect(api, cid))["State"]["Running"]
    await api.post(f"/containers/{cid}/kill")
    with trio.fail_after(5):
        assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 137}


async def test_oom_event(api: httpx.AsyncClient) -> None:
    since = str(time.time() - 1)
    cid, _ = await run(api, ["sh", "-c", "x=$(head -c 64000000 /dev/zero | tr '\\0' a)"],
                       HostConfig={"Memory": 8 << 20, "MemorySwap": 8 << 20})
    r = await api.get("/events", params={"since": since, "until": str(time.time() + 1),
                                         "filters": json.dumps({"container": [cid]})})
    actions = [json.loads(x)["Action"] for x in r.text.splitlines()]
    assert actions.index("oom") < actions.index("die")
