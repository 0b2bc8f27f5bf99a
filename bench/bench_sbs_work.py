"""Side-by-side figures of exec and removals (issue 27), Docker API only (``bench.sbs``).

* **exec_cpu**: in a running busybox ``sleep``, 20 execs of ``true``: ``POST
  /containers/{id}/exec`` alone (median latency), create + hijacked start until the stream
  closes (median), and the CPU time per exec of the daemon alone and of the engine (svcd;
  dockerd + containerd), runc and shims excluded: only each process's own utime + stime,
  read before the first exec and 100 ms after the last stream closed.
* **removals**: a ~500 MB image of ~15,000 files (``bench.bigimage``) is loaded through
  ``POST /images/load`` (untimed, its load time reported), ``sync``, then ``DELETE
  /images/{name}`` is timed to the answer. Then 5 containers run ``true`` to their end and
  each ``DELETE /containers/{id}`` is timed (median).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench import bigimage, dockerapi
from bench.bench_sbs_api import population
from bench.context import Context
from bench.engines import Engine
from bench.harness import Target
from bench.sbs import Metric, Spec

EXECS = 20
RAN = 5


def _exec(ctx: Context, eng: Engine, state: dict[str, Any]) -> dict[str, float]:
    n = ctx.scaled(EXECS, 5)
    creates, cycles = [], []
    with dockerapi.Client(eng.socket) as c:
        c.call("GET", "/_ping", want=200)
        cpu0 = eng.cpu_all()
        for _ in range(n):
            t0 = time.perf_counter()
            eid = c.exec_create(state["sleeper"], ["true"])
            creates.append(time.perf_counter() - t0)
            dockerapi.exec_start(eng.socket, eid)
            cycles.append(time.perf_counter() - t0)
        time.sleep(0.1)  # the daemon's bookkeeping after the stream closed
        cpu1 = eng.cpu_all()
    return {"create": 1000 * statistics.median(creates),
            "cycle": 1000 * statistics.median(cycles),
            "cpu_daemon": 1000 * (cpu1["daemon"] - cpu0["daemon"]) / n,
            "cpu_engine": 1000 * (cpu1["engine"] - cpu0["engine"]) / n}


EXEC = Spec("exec_cpu", "exec of `true` in a running container: latency, daemon CPU", (
    Metric("create", "POST /containers/{id}/exec alone (median)", "ms",
           note="reference 0.9-1.4 ms (issue 27)"),
    Metric("cycle", "exec create+start of `true` to the stream's end (median)", "ms"),
    Metric("cpu_daemon", "daemon CPU per exec (svcd; dockerd)", "ms", Target("<=", 10.0),
           note="own utime+stime; runc and shims excluded"),
    Metric("cpu_engine", "engine CPU per exec (svcd; dockerd+containerd)", "ms",
           note="reference 14 ms (issue 27)"),
), _exec, population)


def _removals_setup(ctx: Context, eng: Engine) -> dict[str, Any]:
    img = ctx.shared.get("bigimage")
    if img is None:
        img = ctx.shared["bigimage"] = bigimage.build(ctx.workdir / "bigimage", ctx.scale)
    dockerapi.ensure_busybox(eng.socket, ctx.workdir)
    return {"image": img}


def _removals(ctx: Context, eng: Engine, state: dict[str, Any]) -> dict[str, float]:
    img: bigimage.BigImage = state["image"]
    load_s = dockerapi.load_image(eng.socket, img.tarball)
    dockerapi.sync()
    with dockerapi.Client(eng.socket) as c:
        t0 = time.perf_counter()
        c.call("DELETE", f"/images/{img.name}", want=200)
        rmi = time.perf_counter() - t0
        ran = []
        for _ in range(ctx.scaled(RAN, 3)):
            cid = c.create(["true"])
            c.start(cid)
            c.wait(cid)
            t0 = time.perf_counter()
            c.remove(cid)
            ran.append(time.perf_counter() - t0)
    return {"rmi": 1000 * rmi, "rm_ran": 1000 * statistics.median(ran), "load": load_s}


def _removals_teardown(ctx: Context, eng: Engine, state: dict[str, Any]) -> None:
    with dockerapi.Client(eng.socket) as c:
        c.call("DELETE", f"/images/{state['image'].name}")


REMOVALS = Spec("removals", "rmi of a ~500 MB, 15,000-file image; remove of a container that ran", (
    Metric("rmi", "DELETE /images/{name}, ~500 MB, ~15,000 files", "ms", Target("<=", 100.0),
           note="to the answer, after a sync; reference 3.2-3.4 s (issue 27)"),
    Metric("rm_ran", "DELETE /containers/{id} of a container that ran (median)", "ms",
           note="reference 10-14 ms (issue 27)"),
    Metric("load", "POST /images/load of that image (untimed setup of each round)", "s",
           burn=False),
), _removals, _removals_setup, _removals_teardown)

SPECS = (EXEC, REMOVALS)
