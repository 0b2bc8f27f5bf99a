"""The daemon's resident memory: at idle, and after the other benchmarks.

How it is measured: ``VmRSS`` (and the peak, ``VmHWM``) from /proc/PID/status of the svcd
process. ``rss_idle`` reads it 2 s after the daemon first answered ``/_ping``, before any other
benchmark has touched it (it runs first). ``rss_after`` reads it at the end of a run, after the
event floods and request loads, with no client connected.

Target: < 80 MiB at idle. Reference: dockerd plus its runtime manager (containerd) take 114 MiB
at idle on this machine.
"""

from __future__ import annotations

import time

from bench.context import Context
from bench.harness import Figure, Outcome, Target, proc_status_kib

IDLE_AFTER_S = 2.0
TARGET_MIB = 80.0
REFERENCE_MIB = 114.0
REFERENCE = f"dockerd + containerd: {REFERENCE_MIB:.0f} MiB"


def _mib(kib: int) -> float:
    return kib / 1024


def rss_idle(ctx: Context) -> Outcome:
    """svcd VmRSS at idle, 2 s after it is ready (target < 80 MiB; dockerd: 114 MiB)."""
    wait = ctx.daemon.ready_at + IDLE_AFTER_S - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    st = proc_status_kib(ctx.daemon.pid)
    out = Outcome(details={k: _mib(v) for k, v in st.items()})
    out.figures.append(Figure("rss_idle", "VmRSS at idle", _mib(st["VmRSS"]), "MiB",
                              Target("<", TARGET_MIB), note=REFERENCE))
    if ctx.ran:
        out.warnings.append(f"rss_idle ran after {', '.join(ctx.ran)}: not an idle figure")
    return out


def rss_after(ctx: Context) -> Outcome:
    """svcd VmRSS (and peak VmHWM) at the end of the run, after the other benchmarks."""
    time.sleep(0.5)  # let closed connections and streams finish tearing down
    st = proc_status_kib(ctx.daemon.pid)
    before = ", ".join(n for n in ctx.ran if n != "rss_idle") or "nothing"
    out = Outcome(details={k: _mib(v) for k, v in st.items()} | {"after": before})
    out.figures += [
        Figure("rss_after", "VmRSS after the run", _mib(st["VmRSS"]), "MiB",
               note=f"after: {before}"),
        Figure("rss_after", "VmHWM (peak RSS)", _mib(st["VmHWM"]), "MiB", note=REFERENCE),
    ]
    return out
