"""Events per second delivered by ``GET /events``: to 1 subscriber, and to each of 100.

How it is measured:
* The subscribers run in a process of their own (``bench.subscribers``): raw unix sockets, one
  epoll loop, counting ``}\\n`` in the chunked body without parsing it, so the client is not
  the bottleneck. Once every subscriber has its response head (svcd subscribes before sending
  it), the runner asks the probe route to publish N events:
  ``POST /_probe/events?n=N&paced=1``. ``paced`` makes the publisher wait whenever some
  subscriber is more than 2048 events behind, so none should hit the 4096-event cut-off.
* Per subscriber: rate = events that arrived after its first read / (last arrival - first
  arrival). For 100 subscribers the headline is the slowest one; the median and the total
  deliveries/s are reported beside it.
* Every subscriber must receive every event. A cut-off (svcd's final ``{"error": ...}`` line)
  or a shortfall is reported as a MISS of "complete subscribers" and as a warning.
* svcd's CPU time over the run (from /proc) is reported too: near 100 % of one core means svcd,
  not the client, limits the rate.

Targets: >= 50,000 events/s to one subscriber; >= 10,000 events/s to each of 100.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from typing import Any

from bench.context import Context
from bench.harness import PYTHON, REPO, Figure, Outcome, Target, body_of, call, cpu_seconds

RUN_TIMEOUT = 180.0


def _start_subscribers(ctx: Context, subs: int, expect: int) -> subprocess.Popen[str]:
    argv = [PYTHON, "-m", "bench.subscribers", "--socket", str(ctx.daemon.socket),
            "--subs", str(subs), "--expect", str(expect), "--timeout", str(RUN_TIMEOUT)]
    errlog = open(ctx.workdir / f"subscribers-{subs}.log", "w")  # noqa: SIM115
    ctx.cleanup.callback(errlog.close)
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=errlog, text=True)
    ctx.cleanup.callback(_reap, proc)
    return proc


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def _publish(ctx: Context, n: int) -> dict[str, Any]:
    target = f"/_probe/events?n={n}&paced=1&type=container&action=start&id=bench"
    status, raw = call(ctx.daemon.socket, "POST", target, timeout=RUN_TIMEOUT)
    if status != 200:
        raise RuntimeError(f"the probe publisher answered {status}: {body_of(raw)[:200]!r}")
    result: dict[str, Any] = json.loads(body_of(raw))
    return result


def _collect(ctx: Context, subs: int, events: int) -> dict[str, Any]:
    """Start the subscribers, publish, and return their report plus svcd's CPU figures."""
    proc = _start_subscribers(ctx, subs, events)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith('{"ready"'):
        _reap(proc)
        log = (ctx.workdir / f"subscribers-{subs}.log").read_text()[-2000:]
        raise RuntimeError(f"the subscribers did not get ready:\n{log}")
    cpu0, t0 = cpu_seconds(ctx.daemon.pid), time.monotonic_ns()
    published = _publish(ctx, events)
    t_published = time.monotonic_ns()
    out, _ = proc.communicate(timeout=RUN_TIMEOUT + 30)
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    t_end = max((s["last_ns"] for s in report["subs"]), default=t_published)
    report.update(published=published["published"], publish_s=(t_published - t0) / 1e9,
                  run_s=(t_end - t0) / 1e9, svcd_cpu_s=cpu_seconds(ctx.daemon.pid) - cpu0)
    return report


def _rate(sub: dict[str, Any]) -> float:
    span = (sub["last_ns"] - sub["first_ns"]) / 1e9
    return (sub["events"] - sub["events_at_first"]) / span if span > 0 else 0.0


def _problems(report: dict[str, Any], events: int) -> list[str]:
    out = []
    cut = sum(1 for s in report["subs"] if s["cut_off"])
    short = [s["events"] for s in report["subs"] if s["events"] < events]
    if cut:
        out.append(f"{cut} subscriber(s) were cut off by svcd (more than 4096 events behind)")
    if short:
        out.append(f"{len(short)} subscriber(s) missed events (fewest received: {min(short)} "
                   f"of {events})")
    if not report["finished"]:
        out.append(f"the subscribers timed out after {RUN_TIMEOUT:.0f} s")
    return out


def _common_figures(name: str, report: dict[str, Any], subs: int,
                    events: int) -> list[Figure]:
    complete = sum(1 for s in report["subs"] if s["events"] >= events and not s["cut_off"])
    cpu_pct = 100 * report["svcd_cpu_s"] / report["run_s"] if report["run_s"] > 0 else 0.0
    return [
        Figure(name, "complete subscribers", complete, f"of {subs}", Target(">=", subs),
               note=f"each must receive all {events:,} events"),
        Figure(name, "svcd CPU during run", cpu_pct, "% of a core",
               note=f"subscriber process: {report['cpu_s']:.1f} s CPU"),
    ]


def _run(ctx: Context, name: str, subs: int, events: int, target: float) -> Outcome:
    report = _collect(ctx, subs, events)
    rates = sorted(_rate(s) for s in report["subs"])
    figures = []
    if subs == 1:
        figures.append(Figure(name, "events/s to 1 subscriber", rates[0], "events/s",
                              Target(">=", target)))
    else:
        total = sum(s["events"] for s in report["subs"])
        first = min(s["first_ns"] for s in report["subs"] if s["first_ns"])
        last = max(s["last_ns"] for s in report["subs"])
        figures += [
            Figure(name, "events/s, slowest subscriber", rates[0], "events/s",
                   Target(">=", target)),
            Figure(name, "events/s, median subscriber", statistics.median(rates), "events/s"),
            Figure(name, "deliveries/s, all subscribers", total / ((last - first) / 1e9),
                   "events/s"),
        ]
    figures += _common_figures(name, report, subs, events)
    details = {k: v for k, v in report.items() if k != "subs"}
    reads = sum(s["reads"] for s in report["subs"])
    details.update(subscribers=subs, events=events, rates=rates,
                   events_per_read=sum(s["events"] for s in report["subs"]) / max(1, reads))
    return Outcome(figures, details, _problems(report, events))


def events_1_sub(ctx: Context) -> Outcome:
    """Events/s delivered to one subscriber (200k events, paced publisher)."""
    return _run(ctx, "events_1_sub", 1, ctx.scaled(200_000, 1000), 50_000)


def events_100_subs(ctx: Context) -> Outcome:
    """Events/s delivered to each of 100 concurrent subscribers (50k events each)."""
    return _run(ctx, "events_100_subs", 100, ctx.scaled(50_000, 1000), 10_000)
