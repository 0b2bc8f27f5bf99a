"""A container's json-file log under a full disk: an ordinary condition, never the end of its
supervision.

``GuardedLog`` wraps the writer with the ``on-full`` policy (``--log-opt on-full=``):

- ``drop`` (the default): output that cannot be written (ENOSPC, EDQUOT, EIO) is counted and
  dropped, and the container runs on; each write tries again, so logging resumes by itself
  once there is room. One line in the daemon's log when it starts failing, one when it
  recovers with what was dropped.
- ``block``: the copy waits (retrying every ``RETRY_SECONDS``) until the write succeeds, so the
  container's own writes block on a full pipe, as a blocking log driver would. A stop or kill
  still ends it: the wait is a cancellable sleep.

The writer's ``write`` is all or nothing, so a retried write is exact. ``close`` never raises.
"""

from __future__ import annotations

import logging

import trio

from svc.storage.jsonlog.writer import JsonLogWriter
from svc.wire.jsonlog import Records

log = logging.getLogger("svc.engine.containers")

RETRY_SECONDS = 0.5
REPORT_SECONDS = 10.0


class GuardedLog:
    """One container's log writer and what it could not write."""

    def __init__(self, writer: JsonLogWriter, short_id: str, mode: str = "drop") -> None:
        self.writer = writer
        self.short_id = short_id
        self.block = mode == "block"
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self.failing: OSError | None = None
        self._reported_at = -REPORT_SECONDS

    async def write(self, name: str, chunk: bytes, ts: int, *, records: bool
                    ) -> tuple[bool, Records | None]:
        """Log ``chunk``; (whether it was written, the records made for ``logs -f``)."""
        while True:
            try:
                made = self.writer.write(name, chunk, ts, records=records)
            except OSError as exc:
                self._failed(exc)
                if not self.block:
                    self.dropped_lines += chunk.count(b"\n") or 1
                    self.dropped_bytes += len(chunk)
                    return False, None
                await trio.sleep(RETRY_SECONDS)
                continue
            self._recovered()
            return True, made

    def flush(self, ts: int, name: str) -> bool:
        """Write ``name``'s unfinished line; False (counted as dropped) when it cannot be."""
        try:
            self.writer.flush(ts, name)
        except OSError as exc:
            self._failed(exc)
            self.dropped_lines += 1
            return False
        return True

    def close(self) -> None:
        """Flush and close; what cannot be written is dropped (and reported)."""
        try:
            self.writer.close()
        except OSError as exc:
            self._failed(exc)
            self.dropped_lines += 1
        if self.dropped_lines:
            log.warning("container %s: %d log line(s) (%d bytes) were dropped in all: its log "
                        "could not be written", self.short_id, self.dropped_lines,
                        self.dropped_bytes)

    def _failed(self, exc: OSError) -> None:
        if self.failing is None:
            self.failing = exc.with_traceback(None)  # its frames would hold this guard
            what = "its output waits" if self.block else "its output is dropped"
            self._report("its log cannot be written (%s): %s until there is room",
                         exc.strerror or exc, what)

    def _recovered(self) -> None:
        if self.failing is not None:
            self.failing = None
            self._report("its log is written again (%d line(s), %d bytes dropped so far)",
                         self.dropped_lines, self.dropped_bytes)

    def _report(self, message: str, *args: object) -> None:
        """At most one line per ``REPORT_SECONDS``: a disk at its limit frees and fills
        again many times a second."""
        now = trio.current_time()
        if now - self._reported_at >= REPORT_SECONDS:
            self._reported_at = now
            log.warning("container %s: " + message, self.short_id, *args)

