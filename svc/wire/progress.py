"""The progress text of JSON progress streams, as moby 1.11's ``jsonmessage.JSONProgress``
renders it on the daemon side (no terminal there, so the width is 200 and the bar is drawn).

The CLI redraws a layer's line from ``progressDetail``; ``progress`` is what the SDKs and
older clients print as they get it, so its shape follows dockerd's:
``[=====>        ]  1.2 MB/3.4 MB 2s``.
"""

from __future__ import annotations

import time

_UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
BAR_WIDTH = 50


def human_size(size: float) -> str:
    """go-units' ``HumanSize``: decimal units, four significant digits (``1.235 MB``)."""
    i = 0
    while size >= 1000 and i < len(_UNITS) - 1:
        size /= 1000
        i += 1
    return f"{size:.4g} {_UNITS[i]}"


def go_duration(seconds: int) -> str:
    """Go's ``time.Duration.String`` for whole seconds (``1m30s``, ``2h0m5s``, ``0s``)."""
    h, rest = divmod(max(seconds, 0), 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{s}s"
    if m:
        return f"{m}m{s}s"
    return f"{s}s"


def bar(current: int, total: int, start: float = 0.0, now: float | None = None) -> str:
    """The ``progress`` string for ``current`` of ``total`` bytes; ``start`` (Unix seconds,
    0 = unknown) adds the time left."""
    if current <= 0 and total <= 0:
        return ""
    shown = human_size(current)
    if total <= 0:
        return f"{shown:>8}"
    filled = min(int(current / total * 100) // 2, BAR_WIDTH)
    box = f"[{'=' * filled}>{' ' * (BAR_WIDTH - filled)}] "
    numbers = f"{shown:>8}/{human_size(total)}" if current <= total else ""
    left = ""
    if current > 0 and start > 0 and filled < BAR_WIDTH:
        elapsed = (time.time() if now is None else now) - start
        left = " " + go_duration(int(elapsed / current * (total - current)))
    return box + numbers + left
