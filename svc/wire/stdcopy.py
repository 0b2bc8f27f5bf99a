"""The multiplexed stream format of attach, logs and exec without a TTY (sans-IO).

Each frame: one byte stream type (0 stdin, 1 stdout, 2 stderr), three zero bytes, the payload
length as a big-endian uint32, then the payload.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

STDIN, STDOUT, STDERR = 0, 1, 2
HEADER = struct.Struct(">BxxxL")  # the one definition (the log reader frames with it too)
_HEADER = HEADER
HEADER_SIZE = HEADER.size


def encode_frame(stream: int, data: bytes) -> bytes:
    return _HEADER.pack(stream, len(data)) + data


@dataclass(frozen=True)
class Frame:
    stream: int
    data: bytes


class FrameDecoder:
    """Feed bytes in any split; get whole frames out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf.extend(data)
        out = []
        while len(self._buf) >= HEADER_SIZE:
            stream, size = _HEADER.unpack_from(self._buf)
            if stream not in (STDIN, STDOUT, STDERR):
                raise ValueError(f"invalid stream type {stream} in frame header")
            if len(self._buf) < HEADER_SIZE + size:
                break
            out.append(Frame(stream, bytes(self._buf[HEADER_SIZE:HEADER_SIZE + size])))
            del self._buf[:HEADER_SIZE + size]
        return out

    @property
    def pending(self) -> int:
        return len(self._buf)
