"""Side-by-side figures of the request path (issue 27): daemon CPU per ``/_ping``, inspect with
500 containers, ``ps`` p99 with 100 concurrent clients, opening 50 event streams, and the
fan-out of one event to 50 subscribers. Docker API only, so each runs against svcd and the
reference engine alike (``bench.sbs``).

* **ping_cpu**: ``bench.httpload`` on 8 keep-alive connections for up to 3 s; the daemon's CPU
  time (/proc, utime + stime of all its threads) over the load / requests answered.
* **inspect_500**: with 500 created containers (and one running), ``GET /containers/{id}/json``
  of 300 of them in a row on one keep-alive connection: median latency, daemon CPU per call.
* **ps_100_clients**: ``GET /containers/json`` (running only, as ``docker ps``) from 100
  keep-alive connections at once, closed loop, with the same 500 containers present: p99, p50.
* **events_open**: 50 ``GET /events`` streams opened one after another, each up to its
  response head; then 50 sent at once, until the last head. The streams are then closed.
* **events_fanout**: 50 subscribers in a process of their own (``bench.fanout``); 20 image
  tags, 50 ms apart; per event, the last subscriber's arrival minus the event's ``timeNano``
  (the producer's clock), and minus the moment the tag request was written.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import dockerapi
from bench.bench_requests import floor
from bench.context import Context
from bench.engines import Engine
from bench.harness import (
    PYTHON,
    REPO,
    Target,
    core_wait_seconds,
    cpu_seconds,
    read_head,
    request_bytes,
)
from bench.httpload import run_load
from bench.sbs import Metric, Spec

POPULATION = 500
INSPECTS = 300
STREAMS = 50
FANOUT_EVENTS = 20
FANOUT_GAP_S = 0.05
SETTLE_S = 0.3


def population(ctx: Context, eng: Engine) -> dict[str, Any]:
    """500 created containers and one running ``sleep`` on ``eng``, made once per run and
    removed when the run's cleanups run."""
    key = f"population:{eng.name}"
    if key in ctx.shared:
        return dict(ctx.shared[key])
    dockerapi.ensure_busybox(eng.socket, ctx.workdir)
    with dockerapi.Client(eng.socket) as c:
        ids = [c.create(["true"]) for _ in range(ctx.scaled(POPULATION, 20))]
        sleeper = c.create(["sleep", "3600"])
        c.start(sleeper)
    state = {"ids": ids, "sleeper": sleeper}
    ctx.shared[key] = state
    ctx.cleanup.callback(_remove_population, eng, state)
    return dict(state)


def _remove_population(eng: Engine, state: dict[str, Any]) -> None:
    with dockerapi.Client(eng.socket) as c:
        for cid in [*state["ids"], state["sleeper"]]:
            c.call("DELETE", f"/containers/{cid}?force=1")


# -- ping ---------------------------------------------------------------------------------


def _ping(ctx: Context, eng: Engine, state: Any) -> dict[str, float]:
    cpu0: list[float] = []
    r = run_load(eng.socket, request_bytes("GET", "/_ping"), conns=8,
                 max_requests=ctx.scaled(30_000, 1000), max_seconds=3.0,
                 on_start=lambda: cpu0.append(eng.cpu()))
    cpu = eng.cpu() - cpu0[0]
    return {"cpu": 1000 * cpu / r.requests, "rps": r.rps, "p50": r.pct(50)}


PING = Spec("ping_cpu", "daemon CPU per GET /_ping (8 keep-alive connections)", (
    Metric("cpu", "daemon CPU per GET /_ping", "ms", Target("<=", 0.3),
           note="utime+stime of the daemon / requests; reference 0.12 ms (issue 27)"),
    Metric("rps", "GET /_ping requests/s, 8 conns", "req/s", higher=True),
    Metric("p50", "GET /_ping p50, 8 conns", "ms"),
), _ping)


# -- inspect and ps with 500 containers ---------------------------------------------------


def _inspect(ctx: Context, eng: Engine, state: dict[str, Any]) -> dict[str, float]:
    ids = random.Random(27).sample(state["ids"] * 2, k=min(INSPECTS, 2 * len(state["ids"])))
    times = []
    with dockerapi.Client(eng.socket) as c:
        c.call("GET", "/_ping", want=200)
        cpu0 = eng.cpu()
        for cid in ids:
            t0 = time.perf_counter()
            c.call("GET", f"/containers/{cid}/json", want=200)
            times.append(time.perf_counter() - t0)
        cpu = eng.cpu() - cpu0
    return {"latency": 1000 * statistics.median(times), "cpu": 1000 * cpu / len(ids)}


INSPECT = Spec("inspect_500", "GET /containers/{id}/json with 500 containers", (
    Metric("latency", "GET /containers/{id}/json, 500 containers (median)", "ms",
           Target("<=", 0.69), Target("<=", 1.0),
           note="reference 0.39-0.69 ms (issue 27)"),
    Metric("cpu", "daemon CPU per inspect", "ms"),
), _inspect, population)


def _ps(ctx: Context, eng: Engine, state: Any) -> dict[str, float]:
    cpu0: list[float] = []
    r = run_load(eng.socket, request_bytes("GET", "/v1.23/containers/json"), conns=100,
                 max_requests=ctx.scaled(5000, 500), max_seconds=5.0,
                 on_start=lambda: cpu0.append(eng.cpu()))
    if r.errors:
        raise RuntimeError(f"{r.errors} answers other than 200")
    cpu = eng.cpu() - cpu0[0]
    return {"p99": r.pct(99), "p50": r.pct(50), "rps": r.rps,
            "cpu": 1000 * cpu / r.requests}


PS = Spec("ps_100_clients", "GET /containers/json from 100 concurrent clients, 500 containers", (
    Metric("p99", "GET /containers/json p99, 100 clients", "ms", None, Target("<=", 2.0),
           note="closed loop, 100 keep-alive connections; 500 created + 1 running"),
    Metric("p50", "GET /containers/json p50, 100 clients", "ms"),
    Metric("rps", "GET /containers/json requests/s, 100 clients", "req/s", higher=True),
    Metric("cpu", "daemon CPU per GET /containers/json", "ms"),
), _ps, population)


# -- event streams ------------------------------------------------------------------------


def _open_streams(sock: Path, cpu: Callable[[], float],
                  pids: list[int]) -> dict[str, float]:
    """50 ``GET /events`` opened one after another, each to its head; then 50 sent at once;
    with the server's CPU per stream opened and closed. Beside the opens one after another,
    how long this client and the server's threads (``pids``) waited for a core: a ping-pong of
    one request at a time pays each side's wake-up, so under contention that wait, not the
    server's work, is what grows."""
    out: dict[str, float] = {}
    cpu0 = cpu()
    waits0 = core_wait_seconds(), sum(core_wait_seconds(p) for p in pids)
    t0 = time.perf_counter()
    socks = []
    for _ in range(STREAMS):
        s = dockerapi.open_stream(sock, "/events")
        socks.append(s)
        head, _ = read_head(s)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"GET /events: {head[:100]!r}")
    out["sequential"] = 1000 * (time.perf_counter() - t0)
    out["wait_client"] = 1000 * (core_wait_seconds() - waits0[0])
    out["wait_server"] = 1000 * (sum(core_wait_seconds(p) for p in pids) - waits0[1])
    for s in socks:
        s.close()
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    socks = [dockerapi.open_stream(sock, "/events") for _ in range(STREAMS)]
    for s in socks:
        head, _ = read_head(s)
    out["at_once"] = 1000 * (time.perf_counter() - t0)
    for s in socks:
        s.close()
    time.sleep(SETTLE_S)
    out["cpu"] = 1000 * (cpu() - cpu0) / (2 * STREAMS)
    return out


def _events_open(ctx: Context, eng: Engine, state: Any) -> dict[str, float]:
    out = _open_streams(eng.socket, eng.cpu, eng.groups["daemon"])
    if eng.name == "svc":  # the same opens against the bare trio floor (one head each)
        srv = floor(ctx)
        out.update({f"floor_{k}": v for k, v in
                    _open_streams(srv.socket, lambda: cpu_seconds(srv.pid), [srv.pid]).items()
                    if not k.startswith("wait_")})
    return out


EVENTS_OPEN = Spec("events_open", "time to open 50 GET /events streams (to each head)", (
    Metric("sequential", "open 50 /events streams, one after another", "ms",
           Target("<=", 34.0), Target("<=", 1.0), note="reference 19-34 ms (issue 27)"),
    Metric("wait_client", "  of which this client waited for a core", "ms", burn=False,
           note="/proc/thread-self/schedstat: runnable, not running"),
    Metric("wait_server", "  of which the daemon's threads waited for a core", "ms",
           burn=False, note="/proc/PID/task/*/schedstat"),
    Metric("at_once", "open 50 /events streams, sent at once", "ms", None, Target("<=", 1.0)),
    Metric("cpu", "daemon CPU per stream opened and closed", "ms"),
    Metric("floor_sequential", "the same 50 one after another, bare trio floor server", "ms",
           note="bench.floor_server: accept, read the head, write one answer"),
    Metric("floor_at_once", "the same 50 at once, bare trio floor server", "ms"),
    Metric("floor_cpu", "floor server CPU per connection opened and closed", "ms"),
), _events_open)


def _fanout_setup(ctx: Context, eng: Engine) -> dict[str, Any]:
    dockerapi.ensure_busybox(eng.socket, ctx.workdir)
    return {"round": 0}


def _fanout(ctx: Context, eng: Engine, state: dict[str, Any]) -> dict[str, float]:
    state["round"] += 1
    n = ctx.scaled(FANOUT_EVENTS, 5)
    argv = [PYTHON, "-m", "bench.fanout", "--socket", str(eng.socket), "--subs", str(STREAMS),
            "--events", str(n), "--timeout", "60"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    tags = [f"r{state['round']}e{i}" for i in range(n)]
    sent = []
    try:
        if not proc.stdout.readline().startswith('{"ready"'):
            raise RuntimeError("the fan-out subscribers did not get ready")
        with dockerapi.Client(eng.socket) as c:
            for tag in tags:
                time.sleep(FANOUT_GAP_S)
                sent.append(time.time_ns())
                c.call("POST", f"/images/{dockerapi.BUSYBOX}/tag?repo=svc-bench/fanout&tag={tag}",
                       want=201)
            out, _ = proc.communicate(timeout=90)
            for tag in tags:
                c.call("DELETE", f"/images/svc-bench/fanout:{tag}", want=200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = json.loads(out.strip().splitlines()[-1])["events"]
    missed = sum(STREAMS - e["subs"] for e in events) + STREAMS * (n - len(events))
    after_event = [(e["last_ns"] - e["time_nano"]) / 1e6 for e in events]
    vals = {"after_event": statistics.median(after_event), "after_event_max": max(after_event),
            "missed": float(missed)}
    if len(events) == n:  # events in tag order (timeNano ascending)
        vals["after_request"] = statistics.median(
            (e["last_ns"] - s) / 1e6 for e, s in zip(events, sent, strict=True))
    return vals


FANOUT = Spec("events_fanout", "last of 50 subscribers gets an event (an image tag)", (
    Metric("after_event", "event to the last of 50 subscribers (median)", "ms",
           Target("<=", 2.0), note="arrival at the last subscriber - the event's timeNano"),
    Metric("after_event_max", "event to the last of 50 subscribers (worst of a round)", "ms"),
    Metric("after_request", "tag request written to the last of 50 subscribers (median)",
           "ms"),
    Metric("missed", "deliveries missed (of 50 per event)", "", Target("<=", 0)),
), _fanout, _fanout_setup)

SPECS = (PING, INSPECT, PS, EVENTS_OPEN, FANOUT)
