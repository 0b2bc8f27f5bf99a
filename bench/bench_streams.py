"""Interactive streams: attach, exec and logs throughput, exec latency, stats, events under
container churn. Raw API calls on unix sockets; a busybox image is imported first.

Floors: the same bytes through a bare trio socket pair (``floor_socketpair``), and for latency
``runc exec`` of ``true`` into a running container with no daemon.

* attach output: a container writes 200 MB (``head -c`` of /dev/zero, no TTY); a client
  attached before the start reads the framed stream to its end. MB/s of payload.
* attach echo: ``cat`` in a container with OpenStdin; the client writes 100 MB into the
  attach connection while reading the echo back. MB/s of the echo.
* exec output: ``head -c 200000000 /dev/zero`` as an exec, read to the end. MB/s.
* logs follow: ``GET /logs?follow=1&stdout=1`` opened right after the start of a container
  that writes 200 MiB of 1000-byte lines in 1 MiB writes; MB/s of payload until the stream
  ends (the clock starts before the start request).
* exec latency: create + start (hijacked) of ``true`` until the stream closes, median of 30;
  svcd's own CPU time (utime+stime, from its CPU clock) over those execs, per exec.
* stats one-shot: ``GET /stats?stream=false`` of a running container, median of 20.
* stats 100 streams: 100 running containers, one ``stats`` stream each for 10 s: svcd's CPU.
* events: 100 subscribers while 100 containers are created, started, stopped and removed;
  every subscriber must see every event; the figure is the time from the last event's
  publication (its ``timeNano``) to its arrival at the slowest subscriber.
"""

from __future__ import annotations

import json
import selectors
import shutil
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.bench_containers import (
    IMAGE,
    Client,
    _check,
    _import_busybox,
    remove_floor_cgroups,
    runc_run,
)
from bench.bench_images import read_body
from bench.context import Context
from bench.harness import (
    Figure,
    Outcome,
    Target,
    connect,
    cpu_seconds,
    read_head,
    request_bytes,
)
from svc.wire.stdcopy import HEADER_SIZE

MB = 1_000_000
OUT_BYTES = 200 << 20
# dd with 1 MiB writes: busybox's head -c writes 4 KiB at a time and tops out near 300 MB/s
# on its own, which would measure the producer, not the stream.
PRODUCER = ["dd", "if=/dev/zero", "bs=1M", f"count={OUT_BYTES >> 20}"]
ECHO_BYTES = 100_000_000
READ = 1 << 20
RUNC = shutil.which("runc") or "/usr/sbin/runc"


def _create(c: Client, cmd: list[str], **fields: Any) -> str:
    body = {"Image": IMAGE, "Cmd": cmd, "HostConfig": {"NetworkMode": "none"}, **fields}
    status, raw = c.call("POST", "/v1.23/containers/create", body)
    _check(status, raw, 201, "create")
    return str(json.loads(raw)["Id"])


def _hijack(sock_path: Path, target: str, body: bytes = b"") -> tuple[socket.socket, bytes]:
    s = connect(sock_path, timeout=300)
    head = (f"POST {target} HTTP/1.1\r\nHost: docker\r\nUpgrade: tcp\r\nConnection: Upgrade\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    s.sendall(head.encode() + body)
    head_b, rest = read_head(s)
    if not head_b.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"no upgrade: {head_b[:200]!r}")
    return s, rest


def _drain_framed(s: socket.socket, first: bytes) -> int:
    """Read a framed stream to EOF; the payload bytes (frame headers not counted)."""
    buf = bytearray(READ)
    view = memoryview(buf)
    total = len(first)
    while n := s.recv_into(view):
        total += n
    return total


def floor_socketpair(nbytes: int) -> float:
    """MB/s of ``nbytes`` through a trio socket pair: a writer task and a reader task."""
    import trio

    async def main() -> float:
        a, b = trio.socket.socketpair()
        chunk = b"x" * (1 << 16)
        got = 0

        async def writer() -> None:
            left = nbytes
            while left > 0:
                n = await a.send(chunk[: min(left, len(chunk))])
                left -= n
            a.close()

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            while True:
                data = await b.recv(READ)
                if not data:
                    break
                got += len(data)
        b.close()
        return got / MB / (time.perf_counter() - t0)

    return trio.run(main)


def runtime_floor(ctx: Context) -> float:
    """MB/s of the same producer under ``runc run`` with no daemon, its stdout a pipe read
    here into a 1 MiB buffer (what the container and the runtime can do on their own)."""
    proc = runc_run(ctx.workdir, PRODUCER, "out", stdout=subprocess.PIPE)
    assert proc.stdout is not None
    buf = memoryview(bytearray(READ))
    total = 0
    t0 = time.perf_counter()
    while n := proc.stdout.readinto(buf):  # type: ignore[attr-defined]
        total += n
    seconds = time.perf_counter() - t0
    proc.wait()
    remove_floor_cgroups()
    return total / MB / seconds


def attach_output(ctx: Context, c: Client, log_config: dict[str, Any] | None = None) -> float:
    """MB/s of an attached client reading 200 MiB of output (its log driver ``none``
    unless ``log_config`` names one)."""
    cid = _create(c, PRODUCER, HostConfig={"NetworkMode": "none",
                                           "LogConfig": log_config or {"Type": "none"}})
    s, rest = _hijack(ctx.daemon.socket, f"/v1.23/containers/{cid}/attach?stream=1&stdout=1")
    c.call("POST", f"/v1.23/containers/{cid}/start")
    t0 = time.perf_counter()
    total = _drain_framed(s, rest)
    seconds = time.perf_counter() - t0
    s.close()
    c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    frames = max(1, total // (1 << 16))  # rough header overhead
    return (total - frames * HEADER_SIZE) / MB / seconds


def attach_echo(ctx: Context, c: Client) -> float:
    cid = _create(c, ["cat"], OpenStdin=True, StdinOnce=True, AttachStdin=True,
                  HostConfig={"NetworkMode": "none", "LogConfig": {"Type": "none"}})
    s, rest = _hijack(ctx.daemon.socket,
                      f"/v1.23/containers/{cid}/attach?stream=1&stdin=1&stdout=1")
    c.call("POST", f"/v1.23/containers/{cid}/start")
    chunk = b"y" * (1 << 16)

    def feed() -> None:
        left = ECHO_BYTES
        try:
            while left > 0:
                s.sendall(chunk[: min(left, len(chunk))])
                left -= len(chunk)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the daemon closed the stream: the figure shows the shortfall
            pass

    t0 = time.perf_counter()
    th = threading.Thread(target=feed, daemon=True)
    th.start()
    total = _drain_framed(s, rest)
    seconds = time.perf_counter() - t0
    th.join()
    s.close()
    c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    return total * (1 - HEADER_SIZE / (1 << 16)) / MB / seconds


def exec_output(ctx: Context, c: Client) -> float:
    cid = _create(c, ["sleep", "600"])
    c.call("POST", f"/v1.23/containers/{cid}/start")
    status, raw = c.call("POST", f"/v1.23/containers/{cid}/exec",
                         {"Cmd": PRODUCER, "AttachStdout": True})
    _check(status, raw, 201, "exec create")
    eid = json.loads(raw)["Id"]
    t0 = time.perf_counter()
    s, rest = _hijack(ctx.daemon.socket, f"/v1.23/exec/{eid}/start", b'{"Detach":false}')
    total = _drain_framed(s, rest)
    seconds = time.perf_counter() - t0
    s.close()
    c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    return total * (1 - HEADER_SIZE / (1 << 16)) / MB / seconds


def logs_follow(ctx: Context, c: Client) -> float:
    """1000-byte lines: one MiB of them is made in the container, then written 200 times
    with 1 MiB writes (``yes | head`` alone manages about 290 MB/s here)."""
    line = 1000
    per_block = (1 << 20) // line
    blocks = OUT_BYTES >> 20
    lines = per_block * blocks
    script = (f"yes {'z' * (line - 1)} | head -n {per_block} > /tmp/l; i=0; "
              f"while [ $i -lt {blocks} ]; do dd if=/tmp/l bs=1M 2>/dev/null; i=$((i+1)); done")
    cid = _create(c, ["sh", "-c", script])
    s = connect(ctx.daemon.socket, timeout=300)
    t0 = time.perf_counter()
    c.call("POST", f"/v1.23/containers/{cid}/start")  # follow needs a running container
    s.sendall(request_bytes("GET", f"/v1.23/containers/{cid}/logs?follow=1&stdout=1"))
    status, total, _ = read_body(s, keep=0)
    seconds = time.perf_counter() - t0
    s.close()
    c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    if status != 200:
        raise RuntimeError(f"logs follow answered {status}")
    return (total - lines * HEADER_SIZE) / MB / seconds


def exec_latency(ctx: Context, c: Client,
                 runs: int) -> tuple[list[float], list[float], float]:
    """Exec create+start of ``true`` (two warm-ups, then ``runs``), ``runc exec`` alone, and
    svcd's own CPU seconds per exec over the timed runs (its utime+stime: runc's CPU is in
    processes of its own, and their cutime/cstime are not counted)."""
    cid = _create(c, ["sleep", "600"])
    c.call("POST", f"/v1.23/containers/{cid}/start")
    times = []
    cpu0 = 0.0
    for i in range(runs + 2):
        if i == 2:
            time.sleep(0.2)  # the warm-ups' exits handled
            cpu0 = cpu_seconds(ctx.daemon.pid)
        t0 = time.perf_counter()
        status, raw = c.call("POST", f"/v1.23/containers/{cid}/exec",
                             {"Cmd": ["true"], "AttachStdout": True, "AttachStderr": True})
        _check(status, raw, 201, "exec create")
        eid = json.loads(raw)["Id"]
        s, rest = _hijack(ctx.daemon.socket, f"/v1.23/exec/{eid}/start", b'{"Detach":false}')
        _drain_framed(s, rest)
        s.close()
        times.append(time.perf_counter() - t0)
    time.sleep(0.2)  # work that follows the last exit (a reaper pass) counts too
    cpu = (cpu_seconds(ctx.daemon.pid) - cpu0) / runs
    floor = []
    state = Path(ctx.daemon.argv[ctx.daemon.argv.index("--exec-root") + 1]) / "runc"
    proc = ctx.workdir / "true-process.json"
    proc.write_text(json.dumps({"args": ["true"], "cwd": "/", "env": [
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "user": {"uid": 0, "gid": 0}}))
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([RUNC, "--root", str(state), "exec", "--process", str(proc), cid],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        floor.append(time.perf_counter() - t0)
    c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    return times[2:], floor, cpu


def stats_one_shot(ctx: Context, c: Client, runs: int) -> list[float]:
    cid = _create(c, ["sleep", "600"])
    c.call("POST", f"/v1.23/containers/{cid}/start")
    times = []
    for _ in range(runs):
        time.sleep(2.1)  # no recent reading: the worst case (two readings)
        t0 = time.perf_counter()
        status, raw = c.call("GET", f"/v1.23/containers/{cid}/stats?stream=0")
        times.append(time.perf_counter() - t0)
        _check(status, raw, 200, "stats")
    c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    return times


def stats_many(ctx: Context, c: Client, n: int, seconds: float) -> tuple[float, int]:
    ids = []
    for _ in range(n):
        cid = _create(c, ["sleep", "600"])
        c.call("POST", f"/v1.23/containers/{cid}/start")
        ids.append(cid)
    socks = []
    sel = selectors.DefaultSelector()
    for cid in ids:
        s = connect(ctx.daemon.socket, timeout=30)
        s.sendall(request_bytes("GET", f"/v1.23/containers/{cid}/stats"))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        socks.append(s)
    time.sleep(1.5)  # the streams are running
    objects = 0
    cpu0, t0 = cpu_seconds(ctx.daemon.pid), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for key, _ in sel.select(0.2):
            data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
            objects += data.count(b"\n{") + data.startswith(b"{")
    cpu = (cpu_seconds(ctx.daemon.pid) - cpu0) / (time.perf_counter() - t0)
    for s in socks:
        s.close()
    for cid in ids:
        c.call("DELETE", f"/v1.23/containers/{cid}?force=1")
    return 100 * cpu, objects


def events_churn(ctx: Context, c: Client, subscribers: int, containers: int
                 ) -> tuple[float, int, int]:
    """(ms from the last event's publication to its arrival at the slowest subscriber, events
    each must see, subscribers that saw them all). A reader thread watches every subscriber
    during the churn and notes when each received its last expected event."""
    socks = []
    for _ in range(subscribers):
        s = connect(ctx.daemon.socket, timeout=30)
        s.sendall(request_bytes("GET", "/v1.23/events?filters="
                                + '{"type":["container"]}'.replace('"', "%22")))
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += s.recv(65536)
        socks.append(s)
    expected = containers * 4  # create, start, die, destroy
    counts = {s.fileno(): 0 for s in socks}
    done_at: dict[int, float] = {}
    last_line: dict[int, bytes] = {}
    stop = threading.Event()

    def reader() -> None:
        sel = selectors.DefaultSelector()
        for s in socks:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
        while not stop.is_set() and len(done_at) < len(socks):
            for key, _ in sel.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(1 << 16)
                except BlockingIOError:
                    continue
                fd = sock.fileno()
                counts[fd] += data.count(b'"Action"')
                if b'"timeNano"' in data:
                    last_line[fd] = data
                if counts[fd] >= expected and fd not in done_at:
                    done_at[fd] = time.time()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    for _ in range(containers):
        cid = _create(c, ["true"])
        c.call("POST", f"/v1.23/containers/{cid}/start")
        c.call("POST", f"/v1.23/containers/{cid}/wait")
        c.call("DELETE", f"/v1.23/containers/{cid}")
    th.join(30)
    stop.set()
    for s in socks:
        s.close()
    tail = max(last_line.values(), key=len, default=b"")
    stamps = [json.loads(x)["timeNano"] for x in tail.split(b"\n")
              if x.startswith(b"{") and b'"timeNano"' in x]
    last_ns = max(stamps, default=0)
    lag_ms = (max(done_at.values()) * 1e9 - last_ns) / 1e6 if done_at and last_ns \
        else float("nan")
    return lag_ms, expected, len(done_at)


def streams(ctx: Context) -> Outcome:
    """Attach/exec/logs throughput beside a trio socket pair, exec and stats latency, stats
    CPU with 100 streams, events to 100 subscribers under container churn."""
    c = Client(ctx.daemon.socket)
    details: dict[str, Any] = {}
    try:
        _import_busybox(c)
        floor = floor_socketpair(OUT_BYTES)
        runtime = runtime_floor(ctx)
        att = attach_output(ctx, c)
        echo = attach_echo(ctx, c)
        exo = exec_output(ctx, c)
        follow = logs_follow(ctx, c)
        lat, lat_floor, exec_cpu = exec_latency(ctx, c, ctx.scaled(30, 10))
        st = stats_one_shot(ctx, c, ctx.scaled(20, 3))
        cpu, objects = stats_many(ctx, c, ctx.scaled(100, 5), 10.0)
        lag, expected, complete = events_churn(ctx, c, ctx.scaled(100, 5),
                                               ctx.scaled(100, 5))
    finally:
        c.close()
    details.update(floor_MB_s=round(floor, 1), runtime_floor_MB_s=round(runtime, 1),
                   attach_MB_s=round(att, 1),
                   echo_MB_s=round(echo, 1), exec_MB_s=round(exo, 1),
                   follow_MB_s=round(follow, 1),
                   exec_ms=[round(x * 1000, 1) for x in lat],
                   runc_exec_ms=[round(x * 1000, 1) for x in lat_floor],
                   exec_cpu_ms=round(exec_cpu * 1000, 2),
                   stats_ms=[round(x * 1000, 1) for x in st], stats_objects=objects,
                   events_expected=expected, events_complete_subscribers=complete)
    out = Outcome(details=details)
    ms = 1000
    out.figures += [
        Figure("streams", "attach output, 200 MiB framed", att, "MB/s", Target(">=", 300),
               floor=floor, note=f"floor: trio socket pair; runc run alone {runtime:.0f} "
                                 "MB/s; reference engine 58 MB/s"),
        Figure("streams", "attach stdin -> cat -> stdout", echo, "MB/s", Target(">=", 150),
               floor=floor, note="100 MB"),
        Figure("streams", "exec output, 200 MiB", exo, "MB/s", Target(">=", 300), floor=floor,
               note=f"runc run alone {runtime:.0f} MB/s"),
        Figure("streams", "logs follow while writing 200 MB", follow, "MB/s",
               Target(">=", 300), floor=floor, note="1000-byte lines"),
        Figure("streams", "exec create+start of true (median)",
               statistics.median(lat) * ms, "ms", Target("<=", 45),
               floor=statistics.median(lat_floor) * ms,
               note=f"median of {len(lat)}; floor: runc exec; reference engine 60 ms"),
        Figure("streams", "svcd CPU per exec of true", exec_cpu * ms, "ms",
               Target("<=", 10), note=f"over {len(lat)} execs, runc excluded; reference "
                                      "engine 14 ms (with containerd)"),
        Figure("streams", "stats stream=false (median)", statistics.median(st) * ms, "ms",
               Target("<=", 50), note=f"median of {len(st)}, no recent reading; "
                                      "reference engine 2010 ms"),
        Figure("streams", f"svcd CPU with {ctx.scaled(100, 5)} stats streams", cpu,
               "% of a core", Target("<=", 25), note=f"{objects} objects in 10 s"),
        Figure("streams", "events: last delivery after the last event", lag, "ms",
               Target("<=", 10), note=f"{complete} of {ctx.scaled(100, 5)} subscribers got "
                                      f"all {expected} events"),
    ]
    if complete != ctx.scaled(100, 5):
        out.warnings.append(f"only {complete} subscribers received every event")
    return out


