"""What a benchmark gets from the runner: the running daemon, a scratch directory, a scale
factor for its counts, and a place to register cleanups and share servers between benchmarks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import Outcome
from bench.procs import ServerProcess


@dataclass
class Context:
    workdir: Path
    daemon: ServerProcess
    scale: float = 1.0
    rounds: int = 3  # side-by-side benchmarks: rounds per engine (and phase)
    contention: bool = False  # side-by-side benchmarks: again with two CPU burners
    ran: list[str] = field(default_factory=list)
    shared: dict[str, Any] = field(default_factory=dict)
    cleanup: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def scaled(self, n: int, minimum: int = 1) -> int:
        return max(minimum, int(n * self.scale))


@dataclass(frozen=True)
class Benchmark:
    name: str
    run: Callable[[Context], Outcome]

    @property
    def summary(self) -> str:
        doc = self.run.__doc__ or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
