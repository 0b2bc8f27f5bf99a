"""``bench/run.py --reference SOCKET``: the side-by-side benchmarks (``bench.sbs``) against the
svcd the runner starts and against the reference engine on SOCKET, rounds alternating (svc,
reference, svc, reference, ...), optionally again under two CPU burners (``--contention``).

Prints the medians per engine, the ratio svc/reference and each target; the full results (every
round's values, the engines' pids, host, load average) go to ``bench/results/`` as for an
ordinary run, with ``"mode": "side-by-side"``. The reference engine is neither started nor
stopped here (``bench/reference.sh``); what a benchmark made on it is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench import report, sbs_report
from bench.context import Context
from bench.engines import Engine, reference_engine, svc_engine
from bench.harness import REPO
from bench.sbs import Row, Spec, rows, run_spec

WithDaemon = Callable[[argparse.Namespace, dict[str, Any], Callable[[Context], None]], None]


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _engines(args: argparse.Namespace, ctx: Context) -> list[Engine]:
    ref = reference_engine(args.reference, args.reference_pid, args.reference_containerd_pid)
    if len(ref.groups["engine"]) == 1:
        say("note: no containerd found beside the reference daemon; engine CPU = daemon CPU")
    return [svc_engine(ctx.daemon.socket, ctx.daemon.pid), ref]


def _run(args: argparse.Namespace, specs: list[Spec], doc: dict[str, Any],
         all_rows: list[Row], failed: dict[str, str], ctx: Context) -> None:
    engines = _engines(args, ctx)
    doc["engines"] = {e.name: e.describe() for e in engines}
    say("engines: " + "; ".join(f"{e.name} {e.socket} pids {e.groups}" for e in engines))
    for spec in specs:
        say(f"{spec.name}: {spec.summary}")
        t0 = time.monotonic()
        entry: dict[str, Any] = {"summary": spec.summary}
        try:
            result = run_spec(ctx, spec, engines, args.rounds, args.contention, say)
        except Exception as exc:  # reported; the other benchmarks still run
            failed[spec.name] = f"{type(exc).__name__}: {exc}"
            entry["error"] = traceback.format_exc()
            say(f"{spec.name} FAILED: {failed[spec.name]}")
        else:
            got = rows(result)
            all_rows.extend(got)
            entry.update(values=result.values, rows=[r.to_json() for r in got])
        entry["seconds"] = round(time.monotonic() - t0, 2)
        doc["benchmarks"][spec.name] = entry
        say(f"{spec.name}: done in {entry['seconds']:.1f} s")


def main(args: argparse.Namespace, specs: list[Spec], doc: dict[str, Any],
         with_daemon: WithDaemon, daemon_notes: Callable[[dict[str, Any]], list[str]]) -> int:
    doc.update(mode="side-by-side", reference=str(args.reference), rounds=args.rounds,
               contention=args.contention)
    all_rows: list[Row] = []
    failed: dict[str, str] = {}
    try:
        with_daemon(args, doc, lambda ctx: _run(args, specs, doc, all_rows, failed, ctx))
    except Exception as exc:  # svcd did not start, or could not be stopped
        failed["(setup)"] = f"{type(exc).__name__}: {exc}"
        doc["error"] = traceback.format_exc()
    doc["finished"] = report.now_iso()
    doc["host"]["loadavg_at_end"] = os.getloadavg()
    doc["rows"] = [r.to_json() for r in all_rows]
    doc["failed"] = failed
    doc["notes"] = report.busy_host_note(doc["host"]) + daemon_notes(doc)
    doc["verdict"] = sbs_report.verdict(all_rows, failed)
    path = report.write_results(doc)
    sbs_report.print_tables(all_rows, args.contention)
    report.print_tail(doc, failed, path.relative_to(REPO))
    return 1 if failed else 0
