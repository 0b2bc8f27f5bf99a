"""Requests/s and p50/p99 latency of ``GET /_ping`` and ``GET /v1.23/version``, beside the floor.

How it is measured:
* ``bench.httpload`` drives keep-alive HTTP/1.1 connections over the unix socket, one request in
  flight per connection (closed loop), after 200 warm-up requests. Latency runs from just before
  the request is written until the last byte of its response has been read.
* Two loads per endpoint: 1 connection (pure latency; the p99 target applies here) and 8
  connections (throughput under concurrency). Each is bounded by a request count and a few
  seconds, whichever comes first.
* The same loads then run against the floor server (``bench.floor_server``): bare trio sockets
  answering the very response bytes svcd sent for that path. Its figures are the "floor" column:
  what this language and event loop cost before any HTTP stack or application code.

Target: p99 < 5 ms on one connection (field notes' budget for ``/_ping``).
"""

from __future__ import annotations

from typing import Any

from bench import procs
from bench.context import Context
from bench.harness import Figure, Outcome, Target, call, cpu_seconds, request_bytes
from bench.httpload import LoadResult, run_load

PATHS = ("/_ping", "/v1.23/version")
P99_TARGET_MS = 5.0
LOADS = {  # connections -> (max requests, max seconds)
    1: (4000, 4.0),
    8: (10000, 4.0),
}


def floor(ctx: Context) -> procs.ServerProcess:
    """The floor server, started once per run with the responses svcd gives for PATHS."""
    srv: procs.ServerProcess | None = ctx.shared.get("floor")
    if srv is None:
        responses = {}
        for path in PATHS:
            status, raw = call(ctx.daemon.socket, "GET", path)
            if status != 200:
                raise RuntimeError(f"GET {path} answered {status}")
            responses[path] = raw
        srv = procs.floor_server(ctx.workdir, responses)
        ctx.cleanup.callback(srv.stop)
        srv.start()
        ctx.shared["floor"] = srv
    return srv


def _load(ctx: Context, srv: procs.ServerProcess, path: str,
          conns: int) -> tuple[LoadResult, float]:
    """One load; returns its result and the server's CPU time per request, in µs."""
    count, seconds = LOADS[conns]
    cpu0: list[float] = []
    result = run_load(srv.socket, request_bytes("GET", path), conns=conns,
                      max_requests=ctx.scaled(count, 100),
                      max_seconds=seconds * min(1.0, ctx.scale),
                      on_start=lambda: cpu0.append(cpu_seconds(srv.pid)))
    cpu_us = 1e6 * (cpu_seconds(srv.pid) - cpu0[0]) / max(1, result.requests)
    return result, cpu_us


def _summary(r: LoadResult, cpu_us: float) -> dict[str, Any]:
    return {"requests": r.requests, "elapsed_s": r.elapsed, "rps": r.rps, "errors": r.errors,
            "server_cpu_us_per_request": cpu_us,
            "p50_ms": r.pct(50), "p90_ms": r.pct(90), "p99_ms": r.pct(99),
            "max_ms": r.latencies_ms[-1] if r.latencies_ms else None}


def _figures(name: str, conns: int, svc: LoadResult, flr: LoadResult) -> list[Figure]:
    tag = f"{conns} conn" if conns == 1 else f"{conns} conns"
    p99_target = Target("<", P99_TARGET_MS) if conns == 1 else None
    return [
        Figure(name, f"requests/s, {tag}", svc.rps, "req/s", floor=flr.rps),
        Figure(name, f"p50, {tag}", svc.pct(50), "ms", floor=flr.pct(50)),
        Figure(name, f"p99, {tag}", svc.pct(99), "ms", p99_target, floor=flr.pct(99)),
    ]


def _endpoint(ctx: Context, name: str, path: str) -> Outcome:
    out = Outcome(details={"path": path})
    flr = floor(ctx)
    for conns in LOADS:
        svc_r, svc_cpu = _load(ctx, ctx.daemon, path, conns)
        flr_r, flr_cpu = _load(ctx, flr, path, conns)
        out.figures += _figures(name, conns, svc_r, flr_r)
        out.details[f"{conns}_conns"] = {"svcd": _summary(svc_r, svc_cpu),
                                         "floor": _summary(flr_r, flr_cpu)}
        if conns == max(LOADS):
            out.figures.append(Figure(name, f"server CPU per request, {conns} conns", svc_cpu,
                                      "µs", floor=flr_cpu))
        if svc_r.errors:
            out.warnings.append(f"{svc_r.errors} non-200 answers from svcd on {path}")
    return out


def ping(ctx: Context) -> Outcome:
    """GET /_ping: requests/s and p50/p99 latency, svcd beside the bare trio floor."""
    return _endpoint(ctx, "ping", PATHS[0])


def version(ctx: Context) -> Outcome:
    """GET /v1.23/version: requests/s and p50/p99 latency, svcd beside the bare trio floor."""
    return _endpoint(ctx, "version", PATHS[1])
