"""Side-by-side benchmarks: the same client code against svcd and a reference engine, in
alternating rounds (svc, reference, svc, reference, ...), medians per engine and their ratio;
optionally again with two CPU burners running, beside the idle figures.

A benchmark here is a ``Spec``: ``setup`` once per engine (untimed), ``measure`` once per round
and engine (returns metric key -> value), ``teardown`` once per engine. The same specs run
against svcd alone (``bench/run.py`` without ``--reference``), judged by their svc targets.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.context import Context
from bench.engines import Engine
from bench.harness import PYTHON, Figure, Outcome, Target

PHASES = ("idle", "burn")
BURNERS = 2
BURN_FACTOR = 2.0  # contention target: no figure more than doubles


@dataclass(frozen=True)
class Metric:
    """One figure of a spec. ``alone`` is svc's own target (issue 27's, or the reference's
    figure the issue recorded); ``vs_ref`` a target on svc/reference, used when a reference
    ran. Lower is better for every metric here unless ``higher`` is set."""

    key: str
    label: str
    unit: str
    alone: Target | None = None
    vs_ref: Target | None = None
    note: str = ""
    higher: bool = False
    burn: bool = True  # judged under contention (not for untimed setup figures)


@dataclass(frozen=True)
class Spec:
    name: str
    summary: str
    metrics: tuple[Metric, ...]
    measure: Callable[[Context, Engine, Any], dict[str, float]]
    setup: Callable[[Context, Engine], Any] = lambda ctx, eng: None
    teardown: Callable[[Context, Engine, Any], None] = lambda ctx, eng, state: None


@dataclass
class Result:
    """Every round's values: phase -> engine -> metric key -> values."""

    spec: Spec
    values: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    def add(self, phase: str, engine: str, vals: dict[str, float]) -> None:
        per = self.values.setdefault(phase, {}).setdefault(engine, {})
        for k, v in vals.items():
            per.setdefault(k, []).append(v)

    def median(self, phase: str, engine: str, key: str) -> float | None:
        vals = self.values.get(phase, {}).get(engine, {}).get(key)
        return statistics.median(vals) if vals else None


@contextlib.contextmanager
def burners(on: bool, n: int = BURNERS) -> Iterator[None]:
    """``n`` processes spinning (``while 1: pass``) while the block runs."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        if on:
            procs = [subprocess.Popen([PYTHON, "-c", "while 1: pass"]) for _ in range(n)]
            time.sleep(0.3)  # let them get going
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def run_spec(ctx: Context, spec: Spec, engines: list[Engine], rounds: int,
             contention: bool, say: Callable[[str], None]) -> Result:
    """Set up on every engine, run the rounds (idle, then with burners), tear down."""
    result = Result(spec)
    states: dict[str, Any] = {}
    try:
        for eng in engines:
            say(f"{spec.name}: setting up on {eng.name}")
            states[eng.name] = spec.setup(ctx, eng)
        for phase in PHASES if contention else PHASES[:1]:
            with burners(phase == "burn"):
                for r in range(rounds):
                    for eng in engines:  # A B A B ...
                        if not eng.alive():
                            raise RuntimeError(f"{eng.name} is no longer running")
                        vals = spec.measure(ctx, eng, states[eng.name])
                        result.add(phase, eng.name, vals)
                        say(f"{spec.name}: {phase} round {r + 1}/{rounds} {eng.name}: "
                            + ", ".join(f"{k}={v:.3g}" for k, v in vals.items()))
    finally:
        for eng in engines:
            if eng.name in states:
                with contextlib.suppress(Exception):
                    spec.teardown(ctx, eng, states[eng.name])
    return result


def _judge(t: Target | None, x: float | None) -> str:
    if t is None or x is None:
        return "-"
    return "OK" if t.met(x) else "MISS"


@dataclass
class Row:
    """One metric side by side: medians, ratio, contention factors and verdicts."""

    bench: str
    metric: Metric
    svc: float | None
    ref: float | None
    svc_burn: float | None = None
    ref_burn: float | None = None

    @staticmethod
    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b else None

    @property
    def target(self) -> str:
        m = self.metric
        if m.vs_ref is not None and self.ref is not None:
            return f"{m.vs_ref.op} {m.vs_ref.value:g}x ref"
        return "" if m.alone is None else f"{m.alone.op} {m.alone.value:g} {m.unit}"

    @property
    def status(self) -> str:
        m = self.metric
        if m.vs_ref is not None and self.ref is not None:
            return _judge(m.vs_ref, self.ratio(self.svc, self.ref))
        return _judge(m.alone, self.svc)

    def burn_factor(self, who: str) -> float | None:
        if who == "svc":
            f = self.ratio(self.svc_burn, self.svc)
        else:
            f = self.ratio(self.ref_burn, self.ref)
        return 1 / f if f and self.metric.higher else f

    @property
    def burn_status(self) -> str:
        if not self.metric.burn:
            return "-"
        return _judge(Target("<=", BURN_FACTOR), self.burn_factor("svc"))

    def to_json(self) -> dict[str, Any]:
        return {"bench": self.bench, "metric": self.metric.label, "unit": self.metric.unit,
                "svc": self.svc, "reference": self.ref, "ratio": self.ratio(self.svc, self.ref),
                "target": self.target, "status": self.status, "svc_burn": self.svc_burn,
                "reference_burn": self.ref_burn,
                "ratio_burn": self.ratio(self.svc_burn, self.ref_burn),
                "svc_burn_factor": self.burn_factor("svc"),
                "reference_burn_factor": self.burn_factor("ref"),
                "burn_status": self.burn_status if self.svc_burn is not None else "-"}


def rows(result: Result) -> list[Row]:
    out = []
    for m in result.spec.metrics:
        def med(phase: str, eng: str, key: str = m.key) -> float | None:
            return result.median(phase, eng, key)
        if med("idle", "svc") is None:
            continue
        out.append(Row(result.spec.name, m, med("idle", "svc"), med("idle", "reference"),
                       med("burn", "svc"), med("burn", "reference")))
    return out


def as_benchmark(spec: Spec) -> Callable[[Context], Outcome]:
    """The spec run against svcd alone, for the ordinary runner: Figures with svc targets
    (and, with ``--contention``, each figure again under two burners, target <= 2x idle)."""

    def run(ctx: Context) -> Outcome:
        from bench.engines import svc_engine

        eng = svc_engine(ctx.daemon.socket, ctx.daemon.pid)
        result = run_spec(ctx, spec, [eng], ctx.rounds, ctx.contention,
                          lambda msg: print(f"[bench] {msg}", file=sys.stderr, flush=True))
        out = Outcome(details={"values": result.values, **result.extra})
        for row in rows(result):
            m = row.metric
            assert row.svc is not None
            out.figures.append(Figure(spec.name, m.label, row.svc, m.unit, m.alone,
                                      note=m.note))
            if row.svc_burn is not None:
                bound = row.svc / BURN_FACTOR if m.higher else row.svc * BURN_FACTOR
                target = Target(">=" if m.higher else "<=", bound) if m.burn else None
                out.figures.append(Figure(spec.name, f"{m.label}, 2 burners", row.svc_burn,
                                          m.unit, target, note=f"idle {row.svc:.3g} {m.unit}"))
        return out

    run.__doc__ = spec.summary
    return run
