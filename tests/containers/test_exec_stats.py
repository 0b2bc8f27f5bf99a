"""Exec instances and stats over the socket."""

from __future__ import annotations

import json
import time

import httpx
import trio

from tests.containers.conftest import create, demux, inspect
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head
from tests.support.procfs import zombie_children


async def running(api: httpx.AsyncClient, cmd: list[str] | None = None, **fields: object) -> str:
    cid: str = (await create(api, cmd or ["sleep", "300"], **fields))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    return cid


async def exec_create(api: httpx.AsyncClient, cid: str, cmd: list[str],
                      status: int = 201, **fields: object) -> str:
    r = await api.post(f"/containers/{cid}/exec", json={
        "Cmd": cmd, "AttachStdout": True, "AttachStderr": True, **fields})
    assert r.status_code == status, r.text
    return r.json()["Id"] if status == 201 else r.text


async def exec_upgrade(d: Daemon, exec_id: str,
                       body: dict[str, object]) -> tuple[trio.SocketStream, bytearray]:
    """Start an exec as the CLI does (upgrade to a raw stream); the stream and what came
    after the 101 head."""
    s = await connect(d.sock)
    raw = json.dumps(body).encode()
    await s.send_all(f"POST /exec/{exec_id}/start HTTP/1.1\r\nHost: svc\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(raw)}\r\nUpgrade: tcp\r\n"
                     "Connection: Upgrade\r\n\r\n".encode() + raw)
    buf = bytearray()
    head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 101"), head
    return s, buf


async def exec_run(d: Daemon, exec_id: str, stdin: bytes | None = None,
                   tty: bool = False) -> bytes:
    s, buf = await exec_upgrade(d, exec_id, {"Detach": False, "Tty": tty})
    if stdin is not None:
        await s.send_all(stdin)
        await s.send_eof()
    with trio.fail_after(15):
        while chunk := await s.receive_some(65536):
            buf += chunk
    await s.aclose()
    return bytes(buf)


async def test_pid_host_exec_orphans_are_reaped_and_its_code_kept(
        cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    """In a container of the host's pid namespace, an exec's own children outlive it and
    are re-parented to the daemon (a subreaper), which reaps them when they exit; the
    exec's exit code is still its supervisor's. Repeated: each exec's process may exit
    before runc does (the reaper must leave it alone until its pid is known)."""
    assert cdaemon.proc is not None
    cid = await running(api, HostConfig={"PidMode": "host"})
    for _ in range(5):
        eid = await exec_create(api, cid, ["sh", "-c", "sleep 0.2 & sleep 0.3 & exit 3"])
        await exec_run(cdaemon, eid)
        assert (await api.get(f"/exec/{eid}/json")).json()["ExitCode"] == 3
        eid = await exec_create(api, cid, ["true"])
        await exec_run(cdaemon, eid)
        assert (await api.get(f"/exec/{eid}/json")).json()["ExitCode"] == 0
    with trio.fail_after(5):
        while zombie_children(cdaemon.proc.pid):
            await trio.sleep(0.05)
    await trio.sleep(0.5)
    assert zombie_children(cdaemon.proc.pid) == []


async def test_exec_output_exit_codes_and_inspect(cdaemon: Daemon,
                                                 api: httpx.AsyncClient) -> None:
    cid = await running(api)
    eid = await exec_create(api, cid, ["sh", "-c", "echo out; echo err >&2; exit 7"])
    info = (await api.get(f"/exec/{eid}/json")).json()
    assert (info["Running"], info["ExitCode"]) == (False, None)
    out = demux(await exec_run(cdaemon, eid))
    assert out[1] == b"out\n" and out[2] == b"err\n"
    info = (await api.get(f"/exec/{eid}/json")).json()
    assert info["ExitCode"] == 7 and info["ProcessConfig"]["entrypoint"] == "sh"
    assert info["ProcessConfig"]["arguments"] == ["-c", "echo out; echo err >&2; exit 7"]
    assert info["Container"]["Id"] == cid and info["OpenStdout"] is True
    assert eid in (await inspect(api, cid))["ExecIDs"]
    for cmd, code in ((["nope"], 127), (["/etc/passwd"], 126), (["sh", "-c", "kill -9 $$"],
                                                                137)):
        eid = await exec_create(api, cid, cmd)
        data = await exec_run(cdaemon, eid)
        assert (await api.get(f"/exec/{eid}/json")).json()["ExitCode"] == code, data
    r = await api.post(f"/exec/{eid}/start", json={"Detach": True})
    assert r.status_code == 409  # already ran
    assert (await api.get("/exec/nope/json")).status_code == 404
    assert (await api.post("/exec/nope/start", json={})).status_code == 404


async def test_exec_output_waits_until_the_client_has_read_the_head(
        cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    """docker-py reads the head through a buffer and then the raw socket: output that came
    with the head would be lost, so a slow client's first read must hold the head alone."""
    cid = await running(api)
    eid = await exec_create(api, cid, ["echo", "right-away"])
    s = await connect(cdaemon.sock)
    body = b'{"Detach":false,"Tty":false}'
    await s.send_all(f"POST /exec/{eid}/start HTTP/1.1\r\nHost: svc\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                     + body)
    await trio.sleep(0.5)  # long enough for echo to finish and its output to be written
    first = await s.receive_some(65536)
    assert first.startswith(b"HTTP/1.1 200 OK") and first.endswith(b"\r\n\r\n"), first
    rest = bytearray()
    with trio.fail_after(15):
        while chunk := await s.receive_some(65536):
            rest += chunk
    await s.aclose()
    assert demux(bytes(rest))[1] == b"right-away\n"


async def test_exec_stdin_detach_and_namespaces(cdaemon: Daemon,
                                               api: httpx.AsyncClient) -> None:
    cid = await running(api, HostConfig={"NetworkMode": "none"})
    eid = await exec_create(api, cid, ["cat"], AttachStdin=True)
    assert demux(await exec_run(cdaemon, eid, stdin=b"piped\n"))[1] == b"piped\n"
    eid = await exec_create(api, cid, ["sh", "-c", "echo detached > /tmp/d; sleep 2"])
    r = await api.post(f"/exec/{eid}/start", json={"Detach": True})
    assert r.status_code == 200
    assert (await api.get(f"/exec/{eid}/json")).json()["Running"] is True
    # top shows the exec's process beside the container's
    with trio.fail_after(5):
        while not any("sleep 2" in " ".join(p) for p in
                      (await api.get(f"/containers/{cid}/top")).json()["Processes"]):
            await trio.sleep(0.05)
    eid2 = await exec_create(api, cid, ["sh", "-c", "cat /tmp/d; hostname; ls /sys/class/net; "
                                                     "id -u"], User="nobody")
    lines = demux(await exec_run(cdaemon, eid2))[1].decode().split()
    assert lines == ["detached", cid[:12], "lo", "65534"]


async def test_exec_conflicts(api: httpx.AsyncClient) -> None:
    created = (await create(api, ["sleep", "300"]))["Id"]
    await exec_create(api, created, ["true"], status=409)
    cid = await running(api)
    eid = await exec_create(api, cid, ["true"])
    await api.post(f"/containers/{cid}/pause")
    text = await exec_create(api, cid, ["true"], status=409)
    assert "is paused" in text
    r = await api.post(f"/exec/{eid}/start", json={"Detach": True})
    assert r.status_code == 409 and "paused" in r.text
    await api.post(f"/containers/{cid}/unpause")
    await api.post(f"/containers/{cid}/kill")
    r = await api.post(f"/exec/{eid}/start", json={"Detach": True})
    assert r.status_code == 409 and "not running" in r.text
    assert (await api.post("/containers/nope/exec", json={"Cmd": ["x"]})).status_code == 404


async def test_exec_tty_and_resize(cdaemon: Daemon, api: httpx.AsyncClient) -> None:
    cid = await running(api)
    eid = await exec_create(api, cid, ["sh", "-c", "sleep 0.5; stty size"], Tty=True)
    plain = await exec_create(api, cid, ["sleep", "1"])
    await api.post(f"/exec/{plain}/start", json={"Detach": True})
    r = await api.post(f"/exec/{plain}/resize", params={"h": "10", "w": "20"})
    assert r.status_code == 400 and "no TTY" in r.text

    async def resize_soon() -> None:
        with trio.fail_after(5):
            while True:
                r = await api.post(f"/exec/{eid}/resize", params={"h": "40", "w": "123"})
                if r.status_code == 201:
                    return
                await trio.sleep(0.02)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(resize_soon)
        out = await exec_run(cdaemon, eid, tty=True)
    assert out.endswith(b"40 123\r\n")


async def test_exec_framing_follows_the_start_requests_tty(cdaemon: Daemon,
                                                          api: httpx.AsyncClient) -> None:
    """As dockerd: create's Tty gives the process a terminal, start's Tty alone decides the
    stream's framing. Both SDKs create with Tty true and start with Tty false, then demux."""
    cid = await running(api)
    eid = await exec_create(api, cid, ["sh", "-c", "tty >/dev/null && echo term"], Tty=True)
    out = await exec_run(cdaemon, eid, tty=False)
    assert demux(out)[1] == b"term\r\n"  # one stdout frame of the terminal's output
    eid = await exec_create(api, cid, ["sh", "-c", "echo out; echo err >&2"])
    out = await exec_run(cdaemon, eid, tty=True)
    assert sorted(out.splitlines()) == [b"err", b"out"]  # raw, both streams merged


async def test_exec_events(api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    since = str(time.time() - 1)
    cid = await running(api)
    eid = await exec_create(api, cid, ["true"])
    await api.post(f"/exec/{eid}/start", json={"Detach": True})
    r = await api.get("/events", params={"since": since, "until": str(time.time() + 1),
                                         "filters": json.dumps({"container": [cid]})})
    actions = [json.loads(x)["Action"] for x in r.text.splitlines()]
    assert "exec_create: true" in actions and "exec_start: true" in actions


async def test_stats_one_shot_values_and_shapes(api: httpx.AsyncClient) -> None:
    busy = await running(api, ["sh", "-c", "while :; do :; done"])
    hold = await running(api, ["sh", "-c", "dd if=/dev/zero of=/dev/shm/fill bs=1M count=50 "
                                           "2>/dev/null; sleep 300"],
                         HostConfig={"ShmSize": 128 << 20})
    await trio.sleep(1.0)
    t0 = time.monotonic()
    r = await api.get(f"/containers/{busy}/stats", params={"stream": "0"})
    assert time.monotonic() - t0 < 1.0  # no earlier reading: two, 25 ms apart
    assert r.json()["precpu_stats"]["cpu_usage"]["total_usage"] > 0
    # a second one-shot read uses the first as precpu_stats: CPU % over a full second,
    # steady even on a busy machine
    await trio.sleep(1.0)
    s = (await api.get(f"/containers/{busy}/stats", params={"stream": "0"})).json()
    cpu, pre = s["cpu_stats"], s["precpu_stats"]
    delta = cpu["cpu_usage"]["total_usage"] - pre["cpu_usage"]["total_usage"]
    system = cpu["system_cpu_usage"] - pre["system_cpu_usage"]
    ncpu = len(cpu["cpu_usage"]["percpu_usage"])
    pct = delta / system * ncpu * 100
    assert 50 < pct < 130, pct  # a busy loop: about one core
    for key in ("read", "memory_stats", "blkio_stats", "networks", "pids_stats"):
        assert key in s
    assert s["networks"]["lo"]["rx_bytes"] >= 0
    m = (await api.get(f"/containers/{hold}/stats", params={"stream": "0"})).json()
    used = m["memory_stats"]["usage"] - m["memory_stats"]["stats"]["total_inactive_file"]
    assert 45 << 20 < used < 70 << 20, used
    old = (await api.get(f"/v1.20/containers/{hold}/stats", params={"stream": "0"})).json()
    assert "network" in old and "networks" not in old and "pids_stats" not in old


async def test_stats_stream_ends_when_the_container_stops(api: httpx.AsyncClient) -> None:
    cid = await running(api, ["sleep", "1.5"])
    got = []
    with trio.fail_after(15):
        async with api.stream("GET", f"/containers/{cid}/stats") as r:
            async for line in r.aiter_lines():
                if line.strip():
                    got.append(json.loads(line))
    assert len(got) >= 1 and all("cpu_stats" in g for g in got)
    assert (await api.get("/containers/nope/stats")).status_code == 404


async def _close_request(d: Daemon, method: str, target: str, body: bytes = b"") -> bytes:
    """One request with ``Connection: close`` (urllib's and many scripts' header): the
    whole answer, read until the daemon closes."""
    s = await connect(d.sock)
    head = (f"{method} {target} HTTP/1.1\r\nHost: svc\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    await s.send_all(head.encode() + body)
    out = bytearray()
    with trio.fail_after(15):
        while chunk := await s.receive_some(65536):
            out += chunk
    await s.aclose()
    return bytes(out)


async def test_streams_serve_connection_close_requests(cdaemon: Daemon,
                                                       api: httpx.AsyncClient) -> None:
    """Every streaming endpoint serves a request that says ``Connection: close`` (they
    answered 503 'the request body must be read before the connection is hijacked')."""
    cid = await running(api, ["sh", "-c", "echo logged; sleep 300"])
    image = (await inspect(api, cid))["Image"]
    await trio.sleep(0.3)
    now = int(time.time()) + 1
    eid = await exec_create(api, cid, ["echo", "from-exec"])
    cases = [("GET", f"/events?since=0&until={now}", b"", b'"status"'),
             ("GET", f"/containers/{cid}/logs?stdout=1", b"", b"logged"),
             ("GET", f"/images/{image}/get", b"", b"manifest.json"),
             ("POST", f"/exec/{eid}/start", b'{"Detach": false, "Tty": false}', b"from-exec"),
             ("GET", f"/containers/{cid}/stats?stream=0", b"", b"memory_stats"),
             ("GET", f"/containers/{cid}/archive?path=/etc/hostname", b"", b"hostname")]
    for method, target, body, want in cases:
        out = await _close_request(cdaemon, method, target, body)
        assert out.startswith(b"HTTP/1.1 200"), (target, out[:300])
        assert want in out, (target, out[:300])
