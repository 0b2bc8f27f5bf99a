"""What holds a process while no daemon does (live restore): svc-shim for containers, and
conmon for exec sessions and for the containers an earlier build started under it (taken
back as they are)."""

from __future__ import annotations

from dataclasses import dataclass

from svc.runtime.conmon.monitor import Conmon
from svc.runtime.shim.launch import Shim


@dataclass(frozen=True)
class Monitors:
    conmon: Conmon
    shim: Shim
