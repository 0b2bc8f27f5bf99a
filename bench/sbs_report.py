"""The side-by-side table: per metric, the medians of svc and of the reference engine, their
ratio (svc/reference), the target and its verdict; with ``--contention``, a second table of the
same medians under two CPU burners, beside each engine's idle value (burn/idle)."""

from __future__ import annotations

from bench.report import fmt, render
from bench.sbs import BURN_FACTOR, Row


def _num(v: float | None, unit: str = "") -> str:
    return "" if v is None else (f"{fmt(v)} {unit}".strip())


def _ratio(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}x"


def _status(s: str) -> str:
    return {"OK": "OK", "MISS": "MISS <<<", "-": ""}[s]


def idle_table(rows: list[Row]) -> str:
    headers = ("benchmark", "metric", "svc", "reference", "svc/ref", "target", "status")
    body = [(r.bench, r.metric.label, _num(r.svc, r.metric.unit), _num(r.ref, r.metric.unit),
             _ratio(Row.ratio(r.svc, r.ref)), r.target, _status(r.status)) for r in rows]
    return render(headers, body, right={2, 3, 4})


def burn_table(rows: list[Row]) -> str:
    headers = ("benchmark", "metric", "svc", "x idle", "reference", "x idle", "svc/ref",
               "status")
    body = [(r.bench, r.metric.label, _num(r.svc_burn, r.metric.unit),
             _ratio(r.burn_factor("svc")), _num(r.ref_burn, r.metric.unit),
             _ratio(r.burn_factor("ref")), _ratio(Row.ratio(r.svc_burn, r.ref_burn)),
             _status(r.burn_status))
            for r in rows if r.svc_burn is not None]
    return render(headers, body, right={2, 3, 4, 5, 6})


def verdict(rows: list[Row], failed: dict[str, str]) -> str:
    judged = [r for r in rows if r.status != "-"]
    missed = [f"{r.bench}: {r.metric.label}" for r in judged if r.status == "MISS"]
    out = f"{len(judged) - len(missed)} of {len(judged)} targets met"
    burned = [r for r in rows if r.svc_burn is not None and r.burn_status != "-"]
    if burned:
        doubled = [f"{r.bench}: {r.metric.label}" for r in burned if r.burn_status == "MISS"]
        out += (f"; under two burners {len(burned) - len(doubled)} of {len(burned)} svc "
                f"figures within {BURN_FACTOR:g}x idle")
        if doubled:
            out += f" (more than doubled: {'; '.join(doubled)})"
    if missed:
        out += f"; MISSED: {'; '.join(missed)}"
    if failed:
        out += f"; FAILED to run: {', '.join(failed)}"
    return out


def print_tables(rows: list[Row], contention: bool) -> None:
    print("\nidle (medians of the rounds)\n")
    print(idle_table(rows))
    if contention:
        print(f"\nwith two CPU burners (x idle: burn/idle of the same engine; target: svc "
              f"<= {BURN_FACTOR:g}x)\n")
        print(burn_table(rows))
