"""Timestamps as the Engine API writes and reads them.

Writing: RFC 3339 with nanoseconds (``2026-11-22T09:43:12.018442034Z``), as Go's RFC3339Nano
does but always with nine digits, like dockerd's inspect output.
Reading: ``since``/``until`` values as clients send them: Unix seconds with an optional
fraction of up to nine digits (``1795340596.000000000``, what the docker CLI sends), or an
RFC 3339 date.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNIX_RE = re.compile(r"^(-?\d+)(?:\.(\d{1,9}))?$")
_RFC3339_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})?$"
)


def rfc3339_nano(when: datetime | int) -> str:
    """Format a UTC datetime or a Unix time in nanoseconds."""
    if isinstance(when, int):
        secs, nanos = divmod(when, 1_000_000_000)
        dt = datetime.fromtimestamp(secs, UTC)
    else:
        dt = when.astimezone(UTC)
        nanos = dt.microsecond * 1000
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def parse_timestamp_ns(value: str) -> int:
    """Parse a ``since``/``until`` value into Unix nanoseconds; ValueError if malformed."""
    value = value.strip()
    m = _UNIX_RE.match(value)
    if m:
        secs = int(m.group(1))
        frac = (m.group(2) or "").ljust(9, "0")
        return secs * 1_000_000_000 + (int(frac) if secs >= 0 else -int(frac))
    m = _RFC3339_RE.match(value)
    if m:
        y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
        frac = (m.group(7) or "").ljust(9, "0")
        tz = m.group(8) or "Z"
        dt = datetime(y, mo, d, h, mi, s, tzinfo=UTC)
        ns = int(dt.timestamp()) * 1_000_000_000 + int(frac)
        if tz not in ("Z", "z"):
            sign = 1 if tz[0] == "+" else -1
            offset = (int(tz[1:3]) * 60 + int(tz[4:6])) * 60
            ns -= sign * offset * 1_000_000_000
        return ns
    raise ValueError(f"{value!r} is not a Unix timestamp or an RFC 3339 date")
