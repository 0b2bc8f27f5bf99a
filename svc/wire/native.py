"""The C twin of the json-file fast path (``native/jsonlog_frames.c``), through ctypes.

``docker logs`` of a long log is a worker thread framing 256 KiB blocks: in Python, one bytes
object per record caps it at about 250 MB/s of payload. The C function frames a block of the
writer's exact shape in one pass, without the GIL (ctypes lets it go for the call), and
answers -1 for anything else, which Python then parses as before.

``scripts/setup.sh`` builds the library into the venv (``<venv>/lib/svc/libsvcwire.so``);
``SVC_WIRE_LIB`` names another. Without it (a checkout not set up, another C library) the
Python path does everything, as before: the library only makes it faster.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger("svc.wire")

LIBRARY = "libsvcwire.so"


def library_path() -> Path:
    """Where the library is looked for: ``SVC_WIRE_LIB``, else the venv's ``lib/svc``."""
    override = os.environ.get("SVC_WIRE_LIB")
    if override:
        return Path(override)
    return Path(sys.executable).parent.parent / "lib" / "svc" / LIBRARY


class Framer:
    """``svc_frame_plain`` of the library."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        fn = lib.svc_frame_plain
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        fn.restype = ctypes.c_ssize_t
        self._fn = fn

    @classmethod
    def load(cls, path: Path | None = None) -> Framer | None:
        path = path or library_path()
        if not path.is_file():
            log.debug("no %s: json-file logs are framed in Python", path)
            return None
        try:
            return cls(ctypes.CDLL(str(path)))
        except (OSError, AttributeError) as exc:
            log.warning("cannot load %s (%s): json-file logs are framed in Python", path, exc)
            return None

    def frames(self, block: bytes) -> tuple[int, bytes] | None:
        """``(stream code, frames)`` of ``block`` (whole lines, all of the writer's exact
        shape and one stream, nothing escaped); None for anything else."""
        if not block:
            return None
        out = ctypes.create_string_buffer(len(block))  # (frames are never longer)
        code = ctypes.c_int(0)
        n = self._fn(block, len(block), out, ctypes.byref(code))
        if n < 0 or not code.value:
            return None
        return code.value, ctypes.string_at(out, n)


FRAMER = Framer.load()
