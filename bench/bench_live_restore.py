"""Live restore (issue 30): what running containers under svc-shim costs, beside svc without it.

Two daemons of their own (``tests.support.daemon``), one plain and one with ``--live-restore``,
each with busybox imported; the benchmark's shared svcd is not used. Runs alternate between them:

* **monitor RSS**: VmRSS of each svc-shim with ten idle containers, and of one whose
  container has written 10 MB while no daemon read it (into its spool; target: at most 2 MiB
  each);
* **run**: create, start and wait of ``true`` (the floor: the plain daemon);
* **output**: create, start and wait of a container writing 20 MB, which ends once all of it
  is in the json-file log: throughput in MB/s (the floor: pipes to the plain daemon);
* **take back**: the start of a daemon that finds 100 containers running under their shims
  (killed with SIGKILL first; one of them spooled 10 MB meanwhile), until it answers
  ``/_ping`` (each one's exit or state is known by then).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench import dockerapi
from bench.context import Context
from bench.harness import Figure, Outcome, Target, proc_status_kib
from tests.support.daemon import Daemon

OUTPUT_MB = 20
TAKE_BACK = 100  # running containers a restarted daemon takes back


def _shims(d: Daemon) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            argv = (p / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"svc-shim") and any(str(d.root).encode() in a
                                                          for a in argv):
            out.append(int(p.name))
    return out


def _run(c: dockerapi.Client, cmd: list[str]) -> float:
    t0 = time.perf_counter()
    cid = c.json("POST", "/containers/create",
                 {"Image": dockerapi.BUSYBOX, "Cmd": cmd,
                  "HostConfig": {"NetworkMode": "none"}}, 201)["Id"]
    c.start(str(cid))
    c.wait(str(cid))
    took = time.perf_counter() - t0
    c.remove(str(cid))
    return took


def live_restore(ctx: Context) -> Outcome:
    """The shim's memory, a run's and the output's cost, and the take-back time at start."""
    daemons = {"plain": Daemon(), "live": Daemon(["--live-restore"])}
    for d in daemons.values():
        ctx.cleanup.callback(d.cleanup)
        d.start()
        dockerapi.ensure_busybox(d.sock, ctx.workdir)
    n = ctx.scaled(20, 5)
    runs: dict[str, list[float]] = {k: [] for k in daemons}
    outputs: dict[str, list[float]] = {k: [] for k in daemons}
    write = ["sh", "-c", f"yes 0123456789012345678901234567890123456789012345678 | "
                         f"head -c {OUTPUT_MB * 1000000}"]
    clients = {k: dockerapi.Client(d.sock) for k, d in daemons.items()}
    try:
        for _ in range(n):
            for k, c in clients.items():
                runs[k].append(_run(c, ["true"]))
        for _ in range(ctx.scaled(3, 2)):
            for k, c in clients.items():
                outputs[k].append(_run(c, write))
        live = daemons["live"]
        c = clients["live"]
        for _ in range(10):
            cid = c.json("POST", "/containers/create",
                         {"Image": dockerapi.BUSYBOX, "Cmd": ["sleep", "600"]}, 201)["Id"]
            c.start(str(cid))
        idle = [proc_status_kib(p)["VmRSS"] for p in _shims(live)]
        pss = [_pss_kib(p) for p in _shims(live)]
        for _ in range(TAKE_BACK - 11):  # (the figure: a start with 100 to take back)
            cid = c.json("POST", "/containers/create",
                         {"Image": dockerapi.BUSYBOX, "Cmd": ["sleep", "600"],
                          "HostConfig": {"NetworkMode": "none"}}, 201)["Id"]
            c.start(str(cid))
        cid = c.json("POST", "/containers/create",
                     {"Image": dockerapi.BUSYBOX,
                      "Cmd": ["sh", "-c", "sleep 1; yes 0123456789 | head -c 10000000; "
                                          "sleep 600"]}, 201)["Id"]
        c.start(str(cid))
    finally:
        for cl in clients.values():
            cl.close()
    live.kill()  # the shims drain into their spools meanwhile
    time.sleep(3.0)
    busy = max(proc_status_kib(p)["VmRSS"] for p in _shims(live))
    t0 = time.perf_counter()
    live.start()
    took_back = time.perf_counter() - t0
    return _figures(runs, outputs, idle, pss, busy, took_back, n)


def _pss_kib(pid: int) -> int:
    """The proportional set size: RSS with each shared page divided among its sharers (the
    libraries every conmon maps count once in all)."""
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


def _figures(runs: dict[str, list[float]], outputs: dict[str, list[float]], idle: list[int],
             pss: list[int], busy: int, took_back: float, n: int) -> Outcome:
    run = {k: statistics.median(v) * 1000 for k, v in runs.items()}
    rate = {k: OUTPUT_MB / statistics.median(v) for k, v in outputs.items()}
    out = Outcome(details={"runs_each": n, "run_ms_p50": run, "output_mb_s": rate,
                           "shim_rss_kib": idle, "shim_pss_kib": pss,
                           "shim_rss_busy_kib": busy,
                           "take_back_s": took_back})
    out.figures += [
        Figure("live_restore", "svc-shim RSS, idle container (largest of 10)",
               max(idle) / 1024, "MiB", Target("<=", 2.0)),
        Figure("live_restore", "svc-shim RSS after spooling 10 MB", busy / 1024, "MiB",
               Target("<=", 2.0)),
        Figure("live_restore", "svc-shim PSS per container (mean of 10)",
               sum(pss) / len(pss) / 1024 if pss else 0.0, "MiB",
               note="its static binary's pages divided among the shims"),
        Figure("live_restore", "create+start+wait of true, p50", run["live"], "ms",
               floor=run["plain"], note=f"floor: without live restore; {n} runs each"),
        Figure("live_restore", f"{OUTPUT_MB} MB of output into the log", rate["live"], "MB/s",
               floor=rate["plain"], note="floor: pipes to the daemon, without live restore"),
        Figure("live_restore", f"start taking back {TAKE_BACK} running containers", took_back,
               "s", note="after a SIGKILL, until /_ping answers"),
    ]
    return out
