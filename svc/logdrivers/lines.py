"""A container's output cut into log messages as dockerd's copier cuts it (and as svc's
json-file writer does): at newlines, a line of ``MAX_LINE`` bytes or more in pieces of that
size marked partial, and at the end of the stream what is left of an unfinished line, marked
partial too. Pure bytes in, ``(line, partial)`` out."""

from __future__ import annotations

from svc.wire.jsonlog import MAX_LINE, has_long_line


class LineCutter:
    """One output stream's cutter: it holds the unfinished line between chunks."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._max = max_line
        self._held = b""

    def feed(self, chunk: bytes) -> list[tuple[bytes, bool]]:
        """The messages ``chunk`` completes (lines without their newline)."""
        data = self._held + chunk if self._held else chunk
        out: list[tuple[bytes, bool]] = []
        start = 0
        while True:
            nl = data.find(b"\n", start, start + self._max)
            if nl >= 0:
                out.append((data[start:nl], False))
                start = nl + 1
            elif len(data) - start >= self._max:
                out.append((data[start : start + self._max], True))
                start += self._max
            else:
                break
        self._held = data[start:]
        return out

    def count(self, chunk: bytes) -> int:
        """How many messages ``feed(chunk)`` would give, without making them (the lines of a
        chunk that is dropped whole are counted); the unfinished line is kept the same."""
        data = self._held + chunk if self._held else chunk
        last = data.rfind(b"\n")
        if self._max != MAX_LINE or (last >= 0 and has_long_line(data[: last + 1])):
            return len(self.feed(chunk))  # (long lines: their pieces, counted the slow way)
        rest = data[last + 1 :]
        pieces = len(rest) // self._max
        self._held = rest[pieces * self._max :]
        return data.count(b"\n", 0, last + 1) + pieces

    def flush(self) -> tuple[bytes, bool] | None:
        """What is left of an unfinished line (the stream ended), as a partial message."""
        held, self._held = self._held, b""
        return (held, True) if held else None
