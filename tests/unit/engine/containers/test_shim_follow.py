"""What a daemon takes back from a shim that has gone (``follow_shim``, without runc): the
spool from the cursor, nothing its log already has (stream offsets), the marker for what the
full spool dropped told once, the exit code the shim wrote; a second daemon repeats nothing,
even one killed between a chunk's write to the log and the cursor's."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from svc.engine.containers.shimmed import follow_shim, gone_handle
from svc.runtime.shim.cursor import CursorState, SpoolCursor
from svc.runtime.shim.launch import ShimFiles
from svc.storage.jsonlog.writer import JsonLogWriter

HEAD = struct.Struct("<B3xIQQ")


def _record(stream: int, at: int, data: bytes, ts: int = 1) -> bytes:
    return HEAD.pack(stream, len(data), ts, at) + data


async def _take_back(files: ShimFiles) -> tuple[list[tuple[str, bytes]], int]:
    handle = gone_handle(4242, files)
    assert handle is not None
    got: list[tuple[str, bytes]] = []

    async def deliver(name: str, chunk: bytes, ts: int, logged: Callable[[], None]) -> None:
        got.append((name, chunk))
        logged()

    try:
        code = await follow_shim(handle, deliver, lambda: (b"", b""))
    finally:
        handle.close()
    return got, code


async def test_a_gone_shim_is_read_once_from_where_the_log_stopped(tmp_path: Path) -> None:
    files = ShimFiles(tmp_path)
    spool = (_record(1, 0, b"a\nb\n") + _record(2, 0, b"e\n") + _record(1, 4, b"c\n")
             + _record(1, 10, b"d\n"))  # (stdout 6..10: dropped by the full spool)
    files.spool.write_bytes(spool)
    files.exit_file.write_text("3 123 4\n")
    cursor = SpoolCursor(str(tmp_path / "cursor"))
    cursor.write(CursorState(0, (b"", b""), 0, (2, 0)))  # "a\n" is in the log already
    cursor.close()

    got, code = await _take_back(files)
    assert code == 3
    assert got[:4] == [("stdout", b"b\n"), ("stderr", b"e\n"), ("stdout", b"c\n"),
                       ("stdout", b"d\n")]
    assert len(got) == 5 and got[4][0] == "stderr"
    assert got[4][1].startswith(b"[svc] output lost") and b"4 bytes" in got[4][1]
    state = SpoolCursor(str(tmp_path / "cursor")).read()
    assert (state.offset, state.dropped, state.logged) == (len(spool), 4, (12, 2))

    again, code = await _take_back(files)  # a daemon killed after it all: nothing twice
    assert (again, code) == ([], 3)


async def test_no_exit_file_is_nothing_to_take_back(tmp_path: Path) -> None:
    assert gone_handle(4242, ShimFiles(tmp_path)) is None
    await trio.lowlevel.checkpoint()


async def test_a_kill_between_the_logs_write_and_the_cursors_logs_nothing_twice(
        tmp_path: Path) -> None:
    """The first daemon writes "b" to the log and is killed before its cursor counts it;
    the next cuts the log back to the cursor's end and logs "b" once, from the spool."""
    files = ShimFiles(tmp_path)
    files.spool.write_bytes(_record(1, 0, b"a\n") + _record(1, 2, b"b\n")
                            + _record(1, 4, b"c\n"))
    files.exit_file.write_text("0 123 0\n")
    log_path = tmp_path / "log.json"

    class Killed(Exception):
        pass

    async def run(kill_at: bytes | None) -> None:
        handle = gone_handle(4242, files)
        assert handle is not None
        writer = JsonLogWriter(log_path, max_size=None)
        writer.take_back(handle.state.log_end)
        writer.hold(handle.state.pending)

        async def deliver(name: str, chunk: bytes, ts: int, logged: Callable[[], None]
                          ) -> None:
            writer.write(name, chunk, ts)
            if chunk == kill_at:
                raise Killed  # (the log has it; the cursor's write never came)
            logged()

        try:
            await follow_shim(handle, deliver, writer.pending, writer.end)
        finally:
            handle.close()
            writer.close()

    with pytest.raises(Killed):
        await run(kill_at=b"b\n")
    assert log_path.read_text().count('"log":"b\\n"') == 1
    await run(kill_at=None)
    lines = [line for line in log_path.read_text().splitlines() if line]
    assert [line.split('"log":"')[1].split("\\n")[0] for line in lines] == ["a", "b", "c"]
