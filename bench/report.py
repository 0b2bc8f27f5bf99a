"""Turning figures into the console table and the JSON results file."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import PYTHON, REPO, Figure, Target

RESULTS_DIR = REPO / "bench" / "results"
BUSY_LOADAVG = 0.5
HEADERS = ("benchmark", "metric", "svcd", "floor", "target", "status", "note")


def fmt(v: float) -> str:
    if float(v).is_integer() or abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _target(t: Target | None, unit: str) -> str:
    return "" if t is None else f"{t.op} {fmt(t.value)} {unit}"


def _row(f: Figure) -> tuple[str, ...]:
    floor = "" if f.floor is None else f"{fmt(f.floor)} {f.unit}"
    status = {"OK": "OK", "MISS": "MISS <<<", "-": ""}[f.status]
    return (f.bench, f.metric, f"{fmt(f.value)} {f.unit}", floor, _target(f.target, f.unit),
            status, f.note)


def table(figures: list[Figure], failed: dict[str, str]) -> str:
    body = [_row(f) for f in figures]
    body += [(name, "(benchmark failed)", "", "", "", "FAILED", msg.splitlines()[0][:60])
             for name, msg in failed.items()]
    return render(HEADERS, body, right={2, 3})


def render(headers: Sequence[str], body: Sequence[Sequence[str]], *, right: set[int]) -> str:
    """A plain-text table: ``headers``, a rule, then ``body``; the columns in ``right``
    (numbers) aligned right."""
    rows = [headers, *body]
    widths = [max(len(r[i]) for r in rows) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def verdict(figures: list[Figure], failed: dict[str, str]) -> str:
    targets = [f for f in figures if f.target is not None]
    missed = [f"{f.bench}: {f.metric}" for f in targets if f.status == "MISS"]
    out = f"{len(targets) - len(missed)} of {len(targets)} targets met"
    if missed:
        out += f"; MISSED: {'; '.join(missed)}"
    if failed:
        out += f"; FAILED to run: {', '.join(failed)}"
    return out


def _git_commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "svc"], cwd=REPO,
                               text=True, capture_output=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty svc/" if dirty else "")


def host_info() -> dict[str, Any]:
    return {"python": PYTHON, "python_version": platform.python_version(),
            "kernel": platform.release(), "cpus": os.cpu_count(), "commit": _git_commit(),
            "hostname": platform.node(), "loadavg_at_start": os.getloadavg()}


def busy_host_note(host: dict[str, Any]) -> list[str]:
    """Other work on this machine shares its cores with svcd and the clients."""
    load1 = host["loadavg_at_start"][0]
    if load1 < BUSY_LOADAVG:
        return []
    return [f"the machine was busy before the run (1-min load average {load1:.2f} on "
            f"{host['cpus']} CPUs): figures may be low; re-run on an idle machine"]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_results(doc: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"bench-{stamp}.json"
    text = json.dumps(doc, indent=2, default=str) + "\n"
    path.write_text(text)
    (RESULTS_DIR / "latest.json").write_text(text)
    return path


def print_tail(doc: dict[str, Any], failed: dict[str, str], path: Path) -> None:
    """What follows a run's table: its notes, the failures, the verdict and the results."""
    print()
    for line in doc["notes"]:
        print(f"note: {line}")
    for name, msg in failed.items():
        print(f"FAILED {name}: {msg}")
    print(f"\n{doc['verdict']}\nresults: {path}")
