"""What a build says: quiet mode holds output back (bounded) and releases it on failure; a
line owed by a step still being finished comes before everything said after it."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from svc.engine.builder import output
from svc.engine.builder.output import Output


async def test_quiet_holds_back_a_bounded_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    send, recv = trio.open_memory_channel[dict[str, object]](100)
    out = Output(send, quiet=True)
    monkeypatch.setattr(output, "QUIET_KEEP", 12)
    for i in range(5):
        await out.line(f"line{i}")  # 6 bytes each
    await out.stderr("e")  # 10 bytes with its colour codes
    assert recv.statistics().current_buffer_used == 0
    await out.release_held()
    got = [recv.receive_nowait() for _ in range(recv.statistics().current_buffer_used)]
    assert got == [{"stream": "(quiet build: 30 bytes of earlier output were not kept)\n"},
                   {"stream": "\x1b[91me\x1b[0m"}]


async def test_result_lines() -> None:
    send, recv = trio.open_memory_channel[dict[str, object]](100)
    await Output(send, quiet=False).result("sha256:" + "ab" * 32, ["a:1", "b:2"])
    await Output(send, quiet=True).result("sha256:" + "cd" * 32, ["a:1"])
    got = [recv.receive_nowait() for _ in range(6)]
    assert got == [{"aux": {"ID": "sha256:" + "ab" * 32}},
                   {"stream": "Successfully built abababababab\n"},
                   {"stream": "Successfully tagged a:1\n"}, {"stream": "Successfully tagged b:2\n"},
                   {"aux": {"ID": "sha256:" + "cd" * 32}}, {"stream": "sha256:" + "cd" * 32 + "\n"}]


def _drain(recv: trio.MemoryReceiveChannel[dict[str, object]]) -> list[object]:
    return [recv.receive_nowait()["stream"]
            for _ in range(recv.statistics().current_buffer_used)]


async def test_an_owed_line_comes_first() -> None:
    send, recv = trio.open_memory_channel[dict[str, object]](100)
    out = Output(send, quiet=False)
    await out.line("Step 1 : COPY a /a")
    out.hold()
    await out.line("Step 2 : RUN x")
    await out.stdout("out")
    assert _drain(recv) == ["Step 1 : COPY a /a\n"]
    await out.release(" ---> 0123456789ab")
    await out.line("after")
    assert _drain(recv) == [" ---> 0123456789ab\n", "Step 2 : RUN x\n", "out", "after\n"]
    out.hold()
    await out.line("kept")
    await out.release(None)  # the step failed: no line, what was kept still comes
    assert _drain(recv) == ["kept\n"]


async def test_a_writer_past_the_hold_limit_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "HOLD_BYTES", 8)
    send, recv = trio.open_memory_channel[dict[str, object]](100)
    out = Output(send, quiet=False)
    out.hold()
    await out.stdout("12345678")
    done = trio.Event()

    async def writer() -> None:
        await out.stdout("more")
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        await out.release("line")
    assert _drain(recv) == ["line\n", "12345678", "more"]
