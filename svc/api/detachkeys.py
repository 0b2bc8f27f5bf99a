"""``detachKeys``: the key sequence that detaches a client (spec: start and attach)."""

from __future__ import annotations

from svc.errors import InvalidParameter

DEFAULT = "ctrl-p,ctrl-q"
_CTRL_SPECIAL = {"@": 0, "[": 27, "\\": 28, "]": 29, "^": 30, "_": 31, ",": 44}


def parse_detach_keys(text: str) -> bytes:
    """``ctrl-p,ctrl-q`` -> b"\\x10\\x11"; each key is one letter or ``ctrl-<a-z@^[,_>``.

    Raises ``InvalidParameter`` naming the bad key, as dockerd's ``term.ToBytes``.
    """
    out = bytearray()
    for key in text.split(","):
        key = key.strip()
        if len(key) == 1 and key.isascii() and key.isprintable():
            out.append(ord(key))
            continue
        low = key.lower()
        if low.startswith("ctrl-") and len(key) == 6:
            ch = low[5]
            if "a" <= ch <= "z":
                out.append(ord(ch) - ord("a") + 1)
                continue
            if ch in _CTRL_SPECIAL:
                out.append(_CTRL_SPECIAL[ch])
                continue
        raise InvalidParameter(f"Invalid escape keys ({text}) provided: the detach keys are a "
                               "comma-separated list of single characters or ctrl-<value> with "
                               "value a-z, @, ^, [, , or _")
    if not out:
        raise InvalidParameter(f"Invalid escape keys ({text}) provided")
    return bytes(out)
