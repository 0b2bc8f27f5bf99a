"""Human sizes as go-units' ``FromHumanSize`` reads them (``10m`` = 10^7 bytes): the log
options' sizes (``max-size``, ``max-buffer-size``)."""

from __future__ import annotations

import re

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?) ?(?:([kmgtp])(?:i?b)?|b)?$", re.IGNORECASE)
_UNITS = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}


def parse_size(value: str) -> int:
    """A ``max-size`` value in bytes, as go-units ``FromHumanSize`` reads it (``10m`` = 10^7).

    Raises:
        ValueError: ``invalid size: '<value>'`` (go-units' message).
    """
    m = _SIZE_RE.match(value)
    if not m:
        raise ValueError(f"invalid size: '{value}'")
    unit = (m.group(2) or "").lower()
    return int(float(m.group(1)) * _UNITS.get(unit, 1))
