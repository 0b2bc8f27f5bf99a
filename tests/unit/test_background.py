"""keep_running: a failing background loop is logged and started again, never raised into
the daemon's nursery; a failure before it started is the start's failure."""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from svc.background import keep_running


async def test_a_failure_after_the_start_is_logged_and_the_task_started_again(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    runs = []

    async def flaky(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        runs.append(trio.current_time())
        if len(runs) < 4:
            raise OSError(24, "Too many open files")

    with caplog.at_level(logging.ERROR, "svc.background"):
        async with trio.open_nursery() as nursery:
            await nursery.start(keep_running, "flaky", flaky)
    assert len(runs) == 4  # the fourth run returned: keep_running returned with it
    pauses = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert pauses == sorted(pauses) and pauses[0] >= 0.5  # backing off
    assert caplog.text.count("the background task flaky failed") == 3
    assert "Too many open files" in caplog.text
    assert "Traceback" not in caplog.text  # an OSError is an ordinary condition: one line


async def test_a_failure_before_the_start_is_raised() -> None:
    async def broken(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(keep_running, "broken", broken)
    matched, rest = info.value.split(OSError)
    assert matched is not None and rest is None
    assert "No space" in str(matched.exceptions[0].exceptions[0])  # type: ignore[union-attr]


async def test_cancellation_ends_it(autojump_clock: trio.testing.MockClock) -> None:
    async def forever(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(keep_running, "forever", forever)
    assert scope.cancelled_caught
