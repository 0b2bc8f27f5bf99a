"""The json-file driver's ``--log-opt`` values, checked with moby's messages: ``max-size``
(go-units sizes), ``max-file`` and ``compress``; the keys dockerd accepts and ignores here;
and svc's own ``on-full``: what a container's output does while the log cannot be written
(a full disk): ``drop`` (the default: lines are counted and dropped, the container runs on)
or ``block`` (its writes wait until there is room)."""

from __future__ import annotations

import re
from collections.abc import Mapping

from svc.wire.units import parse_size

_BOOLS = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
          "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}
# dockerd accepts these too; they only add "attrs" to records, which this writer leaves out.
_ACCEPTED = {"max-size", "max-file", "compress", "labels", "labels-regex", "env", "env-regex",
             "tag", "on-full"}
ON_FULL = ("drop", "block")


def on_full(config: Mapping[str, str]) -> str:
    """The ``on-full`` mode (validated by ``parse_log_opts``)."""
    return config.get("on-full", "drop")


def parse_log_opts(config: Mapping[str, str]) -> tuple[int | None, int, bool]:
    """Validate json-file ``--log-opt`` values into ``(max_size, max_file, compress)``.

    Checks and messages are moby's (``ValidateLogOpt`` and ``jsonfilelog.New``).

    Raises:
        ValueError: an unknown key, a malformed or out-of-range value, or ``compress`` without
            rotation.
    """
    for key in config:
        if key not in _ACCEPTED:
            raise ValueError(f"unknown log opt '{key}' for json-file log driver")
    if config.get("on-full", "drop") not in ON_FULL:
        raise ValueError(f"invalid on-full '{config['on-full']}': use drop or block")
    max_size: int | None = None
    if "max-size" in config:
        max_size = parse_size(config["max-size"])
        if max_size <= 0:
            raise ValueError("max-size must be a positive number")
    max_file = 1
    if "max-file" in config:
        raw = config["max-file"]
        if not re.fullmatch(r"[+-]?\d+", raw):
            raise ValueError(f'strconv.Atoi: parsing "{raw}": invalid syntax')
        max_file = int(raw)
        if max_file < 1:
            raise ValueError("max-file cannot be less than 1")
    compress = False
    if "compress" in config:
        raw = config["compress"]
        if raw not in _BOOLS:
            raise ValueError(f'strconv.ParseBool: parsing "{raw}": invalid syntax')
        compress = _BOOLS[raw]
        if compress and (max_file == 1 or max_size is None):
            raise ValueError(
                "compress cannot be true when max-file is less than 2 or max-size is not set"
            )
    return max_size, max_file, compress
