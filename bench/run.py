"""Run svc's benchmarks and print each figure beside its target.

    python bench/run.py [--scale F] [--list] [--rounds N] [--contention] [NAME ...]
    python bench/run.py --reference SOCKET [--reference-pid PID] [...] [NAME ...]

With ``--reference``, only the side-by-side benchmarks run (``bench.sidebyside``): each against
svcd and against the engine on SOCKET in alternating rounds, with ratios.

One svcd (``tests.support.testd``: svcd plus probe routes) is started with all of its state in a
fresh temporary directory; the chosen benchmarks (all by default) run against it in a fixed
order; svcd is then stopped with SIGTERM and the directory removed. The table goes to stdout and
the full results to ``bench/results/bench-<UTC time>.json`` (and ``latest.json``).

Targets are reported, not gated: the exit code is 0 even when a figure misses its target (the
row says MISS). It is 1 only when a benchmark could not run at all (its row says FAILED), and 2
for a bad command line.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import (  # noqa: E402
    bench_authz,
    bench_build,
    bench_containers,
    bench_events,
    bench_images,
    bench_live_restore,
    bench_logdrivers,
    bench_network,
    bench_overlay,
    bench_pull,
    bench_push,
    bench_removal,
    bench_requests,
    bench_rss,
    bench_sbs_api,
    bench_sbs_work,
    bench_scale,
    bench_soak,
    bench_streams,
    bench_volume_plugins,
    procs,
    report,
    sbs,
    sidebyside,
)
from bench.context import Benchmark, Context  # noqa: E402
from bench.harness import REPO, Figure  # noqa: E402

# Fixed order: rss_idle must see an untouched daemon, rss_after comes last.
BENCHMARKS = [
    Benchmark("rss_idle", bench_rss.rss_idle),
    Benchmark("events_1_sub", bench_events.events_1_sub),
    Benchmark("events_100_subs", bench_events.events_100_subs),
    Benchmark("ping", bench_requests.ping),
    Benchmark("version", bench_requests.version),
    Benchmark("images", bench_images.images),
    Benchmark("push", bench_push.push),
    Benchmark("pull", bench_pull.pull),
    Benchmark("build", bench_build.build),
    Benchmark("containers", bench_containers.containers),
    Benchmark("removal", bench_removal.removal),
    Benchmark("streams", bench_streams.streams),
    Benchmark("logdrivers", bench_logdrivers.logdrivers),
    Benchmark("volume_plugins", bench_volume_plugins.volume_plugins),
    Benchmark("live_restore", bench_live_restore.live_restore),
    Benchmark("network", bench_network.network),
    Benchmark("network_scale", bench_scale.network_scale),
    Benchmark("fuzz_rss", bench_scale.fuzz_rss),
    Benchmark("authz", bench_authz.authz),
    Benchmark("soak", bench_soak.soak),
    Benchmark("overlay", bench_overlay.overlay),
    Benchmark("rss_after", bench_rss.rss_after),
]
# Side by side with a reference engine (--reference), or against svcd alone; after rss_after,
# so the figures above are taken as before (these leave 500 containers until the run's end).
SIDE_BY_SIDE = [*bench_sbs_api.SPECS, *bench_sbs_work.SPECS]
BENCHMARKS += [Benchmark(spec.name, sbs.as_benchmark(spec)) for spec in SIDE_BY_SIDE]
BY_NAME = {b.name: b for b in BENCHMARKS}
LOG_MARKS = (" WARNING ", " ERROR ", " CRITICAL ", "Traceback")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", metavar="NAME",
                   help=f"benchmarks to run (default: all): {', '.join(BY_NAME)}")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply event and request counts (e.g. 0.1 for a quick check)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--reference", type=Path, metavar="SOCKET",
                   help="run the side-by-side benchmarks against svcd and the engine on this "
                        "unix socket (e.g. /tmp/ref/docker.sock from bench/reference.sh)")
    p.add_argument("--reference-pid", type=int, metavar="PID",
                   help="the reference daemon's pid (default: the socket's owner)")
    p.add_argument("--reference-containerd-pid", type=int, metavar="PID",
                   help="its containerd's pid (default: the daemon's child named containerd)")
    p.add_argument("--rounds", type=int, default=3,
                   help="side-by-side benchmarks: rounds per engine (default 3)")
    p.add_argument("--contention", action="store_true",
                   help="side-by-side benchmarks: run every round again with two CPU burners")
    p.add_argument("--daemon-arg", action="append", default=[], metavar="ARG",
                   help="an argument for the benchmark's svcd, repeatable (e.g. "
                        "--daemon-arg=--live-restore: the same figures with every container "
                        "under svc-shim)")
    args = p.parse_args(argv)
    known = [s.name for s in SIDE_BY_SIDE] if args.reference else list(BY_NAME)
    unknown = [n for n in args.names if n not in known]
    if unknown:
        p.error(f"unknown benchmark(s){' for --reference' if args.reference else ''}: "
                f"{', '.join(unknown)}; known: {', '.join(known)}")
    if args.scale <= 0:
        p.error("--scale must be positive")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def say(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def run_one(ctx: Context, bench: Benchmark, doc: dict[str, Any],
            figures: list[Figure], failed: dict[str, str]) -> None:
    say(f"{bench.name}: {bench.summary}")
    t0 = time.monotonic()
    entry: dict[str, Any] = {"summary": bench.summary}
    try:
        if not ctx.daemon.alive():
            raise RuntimeError("svcd is no longer running")
        out = bench.run(ctx)
    except Exception as exc:  # a failed benchmark is reported; the others still run
        failed[bench.name] = f"{type(exc).__name__}: {exc}"
        entry["error"] = traceback.format_exc()
        say(f"{bench.name} FAILED: {failed[bench.name]}")
    else:
        figures.extend(out.figures)
        entry.update(figures=[f.to_json() for f in out.figures], details=out.details,
                     warnings=out.warnings)
        doc["warnings"] += [f"{bench.name}: {w}" for w in out.warnings]
    entry["seconds"] = round(time.monotonic() - t0, 2)
    doc["benchmarks"][bench.name] = entry
    ctx.ran.append(bench.name)
    say(f"{bench.name}: done in {entry['seconds']:.1f} s")


def shutdown_report(daemon: procs.ServerProcess, workdir: Path) -> dict[str, Any]:
    """Stop svcd and check it left nothing behind; reads its log before the directory goes.
    The containers' cgroup parent (``--cgroup-parent /<workdir name>``) and the run's bridge
    are removed too."""
    t0 = time.monotonic()
    code = procs.stop_daemon(daemon, workdir)
    leftovers = [p.name for p in (daemon.socket, workdir / "svc.pid") if p.exists()]
    text = daemon.log_text()
    log_lines = [ln for ln in text.splitlines() if any(m in ln for m in LOG_MARKS)]
    if log_lines or code != 0:  # keep the whole log beside the results for a look
        report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (report.RESULTS_DIR / "svcd-latest.log").write_text(text)
    return {"exit_code": code, "stop_s": round(time.monotonic() - t0, 2),
            "leftovers": leftovers, "log_warnings": log_lines[:50],
            "log_warning_count": len(log_lines)}


def with_daemon(args: argparse.Namespace, doc: dict[str, Any],
                body: Callable[[Context], None]) -> None:
    """Start svcd in a fresh temp dir, run ``body``, then the cleanups, stop svcd, check."""
    procs.check_subnet_free()
    with tempfile.TemporaryDirectory(prefix="svc-bench-", dir="/tmp") as tmp:
        workdir = Path(tmp)
        doc["workdir"] = tmp
        daemon = procs.daemon(workdir, extra=args.daemon_arg)
        doc["daemon_args"] = args.daemon_arg
        try:
            ctx = Context(workdir, daemon, args.scale, rounds=args.rounds,
                          contention=args.contention)
            with ctx.cleanup:
                say(f"starting svcd in {tmp}")
                daemon.start()
                body(ctx)
        finally:
            doc["daemon"] = shutdown_report(daemon, workdir)
    doc["workdir_removed"] = not Path(tmp).exists()


def run_all(chosen: list[Benchmark], args: argparse.Namespace, doc: dict[str, Any],
            figures: list[Figure], failed: dict[str, str]) -> None:
    def body(ctx: Context) -> None:
        for bench in chosen:
            run_one(ctx, bench, doc, figures, failed)

    with_daemon(args, doc, body)


def daemon_notes(doc: dict[str, Any]) -> list[str]:
    d = doc.get("daemon", {})
    notes = [f"svcd stopped with exit code {d.get('exit_code')} in {d.get('stop_s')} s"
             + (f"; LEFT BEHIND: {', '.join(d['leftovers'])}" if d.get("leftovers") else
                "; socket and pid file removed")
             + ("; temp dir removed" if doc.get("workdir_removed") else "; TEMP DIR LEFT")]
    if d.get("log_warning_count"):
        notes.append(f"svcd logged {d['log_warning_count']} warning/error line(s), first: "
                     f"{d['log_warnings'][0]}")
    return notes


def finish(doc: dict[str, Any], figures: list[Figure], failed: dict[str, str]) -> Path:
    """Complete the results document and write it; returns its path."""
    doc["finished"] = report.now_iso()
    doc["host"]["loadavg_at_end"] = os.getloadavg()
    doc["figures"] = [f.to_json() for f in figures]
    doc["failed"] = failed
    doc["notes"] = report.busy_host_note(doc["host"]) + doc["warnings"] + daemon_notes(doc)
    doc["verdict"] = report.verdict(figures, failed)
    return report.write_results(doc)


def print_report(doc: dict[str, Any], figures: list[Figure], failed: dict[str, str],
                 path: Path) -> None:
    print()
    print(report.table(figures, failed))
    report.print_tail(doc, failed, path.relative_to(REPO))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.list:
        for b in BENCHMARKS:
            print(f"{b.name:16} {b.summary}")
        return 0
    doc: dict[str, Any] = {"started": report.now_iso(), "host": report.host_info(),
                           "scale": args.scale, "benchmarks": {}, "warnings": []}
    if args.reference:
        specs = [s for s in SIDE_BY_SIDE if not args.names or s.name in args.names]
        return sidebyside.main(args, specs, doc, with_daemon, daemon_notes)
    chosen = [b for b in BENCHMARKS if not args.names or b.name in args.names]
    figures: list[Figure] = []
    failed: dict[str, str] = {}
    try:
        run_all(chosen, args, doc, figures, failed)
    except Exception as exc:  # svcd did not start, or could not be stopped
        failed["(setup)"] = f"{type(exc).__name__}: {exc}"
        doc["error"] = traceback.format_exc()
    path = finish(doc, figures, failed)
    print_report(doc, figures, failed, path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
