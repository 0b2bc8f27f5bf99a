"""The spool's cursor (``svc.runtime.shim.cursor``) keeps its last whole state: one
``pwrite`` each, a shorter state after a longer one."""

from __future__ import annotations

from pathlib import Path

from svc.runtime.shim.cursor import CursorState, SpoolCursor


def test_the_cursor_keeps_its_last_state(tmp_path: Path) -> None:
    path = str(tmp_path / "cursor")
    cursor = SpoolCursor(path)
    assert cursor.read() == CursorState()
    cursor.write(CursorState(1234, (b"half a li", b"")))
    state = CursorState(99, (b"", b"err"), 7, (5, 6))
    cursor.write(state)  # shorter than before: the old tail is ignored
    cursor.close()
    again = SpoolCursor(path)
    assert again.read() == state
    again.close()
