"""The event log: recent events kept on disk so ``GET /events?since=`` replays across restarts.

An append-only JSON-lines file, written in batches. It is bounded: once it holds more than
``4 * keep`` lines it is rewritten atomically with the newest ``keep``. A line torn by a crash
(the tail of an interrupted append) fails to parse and is skipped on load.

All methods block; the event bus calls them through ``trio.to_thread``.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from pathlib import Path
from typing import Any

from svc.storage.atomic import atomic_write

log = logging.getLogger("svc.eventlog")


class EventLog:
    def __init__(self, path: Path, keep: int) -> None:
        self.path = path
        self.keep = keep
        self._lines = 0
        # The newest records, so that compaction never has to re-read the file.
        self._tail: deque[dict[str, Any]] = deque(maxlen=keep)

    def load(self) -> list[dict[str, Any]]:
        """Return the newest ``keep`` records, oldest first, skipping damaged lines."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        records: list[dict[str, Any]] = []
        bad = 0
        for line in raw.splitlines():
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                bad += 1
                continue
            if isinstance(rec, dict):
                records.append(rec)
            else:
                bad += 1
        if bad:
            log.warning("event log %s: skipped %d damaged line(s)", self.path, bad)
        self._lines = len(records) + bad
        self._tail.clear()
        self._tail.extend(records[-self.keep :])
        return list(self._tail)

    def append(self, records: list[dict[str, Any]]) -> None:
        """Append records; compacts the file when it has grown past its bound."""
        if not records:
            return
        data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in records)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            # A torn previous tail would glue onto this line; start on a fresh line if needed.
            if os.lseek(fd, 0, os.SEEK_END) > 0 and not self._ends_with_newline():
                data = b"\n" + data
            os.write(fd, data)
        finally:
            os.close(fd)
        self._lines += len(records)
        self._tail.extend(records)
        if self._lines > 4 * self.keep:
            self.compact(list(self._tail))

    def compact(self, newest: list[dict[str, Any]]) -> None:
        """Rewrite the log atomically with just ``newest`` (at most ``keep`` records)."""
        newest = newest[-self.keep :]
        data = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in newest)
        atomic_write(self.path, data)
        self._lines = len(newest)

    def _ends_with_newline(self) -> bool:
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
