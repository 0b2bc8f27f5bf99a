"""The spool's cursor (``svc.runtime.shim.cursor``) keeps its last whole state: one
``pwrite`` each, a shorter state after a longer one."""

from __future__ import annotations

from pathlib import Path

from svc.runtime.shim.cursor import HEAD, CursorState, SpoolCursor


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


def test_the_log_end_is_kept_and_a_cursor_of_an_older_build_still_reads(
        tmp_path: Path) -> None:
    path = str(tmp_path / "cursor")
    cursor = SpoolCursor(path)
    cursor.write(CursorState(5, (b"abc", b""), 0, (9, 0), (1234, 5678)))
    state = CursorState(7, (b"ab", b""), 0, (9, 1))  # no log end, and shorter
    cursor.write(state)
    cursor.close()
    again = SpoolCursor(path)
    assert again.read() == state  # (the older state's log end is not read as this one's)
    again.close()
    old = tmp_path / "old"  # as an older build wrote it: no trailer at all
    old.write_bytes(HEAD.pack(3, 0, 4, 0, 2, 0) + b"xy")
    assert SpoolCursor(str(old)).read() == CursorState(3, (b"xy", b""), 0, (4, 0))
