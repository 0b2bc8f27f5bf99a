"""A closed writer holds no descriptor on its file, whoever still holds the writer: a removed
container's log leaves the disk when its name does (CI once found a full disk's space held
by the writers of removed containers, waiting for the cyclic collector)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from svc.storage.jsonlog.writer import JsonLogWriter


def _held(path: Path) -> int:
    """This process's descriptors on ``path`` (deleted or not)."""
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:  # (the listing's own descriptor is gone by now)
            held += os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)") == str(path)
        except FileNotFoundError:
            continue
    return held


def test_close_lets_go_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    gc.disable()  # no collector to hide a descriptor kept by a live writer
    try:
        w = JsonLogWriter(path, max_size=None)
        w.write("stdout", b"hello\n")
        assert _held(path) == 2  # the writer's, and the readers' reference
        w.close()
        assert _held(path) == 0
        path.unlink()
        assert w.closed  # (the writer itself still exists)
    finally:
        gc.enable()


def test_a_reader_keeps_the_file_across_the_close(tmp_path: Path) -> None:
    path = tmp_path / "c-json.log"
    w = JsonLogWriter(path, max_size=None)
    w.write("stdout", b"hello\n")
    ref, end = w.position()
    w.close()
    assert w.position() == (ref, end)  # the same file, as the reader holds it
    assert _held(path) == 1
    with ref.open() as f:
        assert f.read().startswith(b'{"log":"hello\\n"')
    del ref
    assert _held(path) == 0
    again, end_again = w.position()  # nobody held it: opened again, at the same end
    assert end_again == end and _held(path) == 1
    del again
    assert _held(path) == 0


def test_take_back_cuts_only_the_same_file_past_the_recorded_end(tmp_path: Path) -> None:
    """What a live-restored container's next daemon does with its cursor's log end: the
    same live file is cut back to it; a file rotated since is left as it is."""
    path = tmp_path / "c-json.log"
    w = JsonLogWriter(path, max_size=None)
    w.write("stdout", b"one\n")
    end = w.end()
    w.write("stdout", b"two\n")  # written, but not counted by the cursor
    w.close()
    again = JsonLogWriter(path, max_size=None)
    assert again.take_back(end) > 0
    again.write("stdout", b"two\n")
    again.close()
    assert [line.split('"log":"')[1][:3] for line in path.read_text().splitlines()] == \
        ["one", "two"]

    rotating = JsonLogWriter(tmp_path / "r-json.log", max_size=200, max_file=2)
    rotating.write("stdout", b"x" * 150 + b"\n")
    old_end = rotating.end()
    rotating.write("stdout", b"y" * 150 + b"\n")  # rotates: a new live file
    assert rotating.end() != old_end
    assert rotating.take_back(old_end) == 0  # (another file: nothing is cut)
    assert b"y" * 150 in (tmp_path / "r-json.log").read_bytes()
    rotating.close()
