"""What a build says: quiet mode holds output back (bounded) and releases it on failure."""

from __future__ import annotations

import pytest
import trio

from svc.engine.build import output
from svc.engine.build.output import Output


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
