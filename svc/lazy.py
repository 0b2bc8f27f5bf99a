"""Modules loaded at their first use instead of at the daemon's start.

A daemon that never pulls, pushes or joins a cluster store never needs an HTTP client
library: ``httpx`` (with what it pulls in) was a fifth of every start's imports. Modules that
use it bind it with ``lazy_module``; the real import happens at the first attribute taken
from it, in whichever task touches it first (a blocking import of a few hundred
milliseconds, once).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """``name``, imported now if it already is, else on its first attribute access."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
