"""The trash emptier: wakes on a throw, empties what a previous run left, paces its deletes,
and a cancellation leaves the entry for the next start."""

from __future__ import annotations

from pathlib import Path

import trio

from svc.engine.trash import Pacer, TrashEmptier
from svc.storage.trash import Trash


def tree(where: Path, files: int) -> Path:
    (where / "d").mkdir(parents=True)
    for i in range(files):
        (where / "d" / f"f{i}").write_bytes(b"x")
    return where


def test_pacer_sleeps_after_each_batch_for_the_duty_cycle() -> None:
    now = [0.0]
    slept: list[float] = []
    pacer = Pacer(slept.append, batch=4, duty=0.25, min_pause=0.001, clock=lambda: now[0])
    for _ in range(3):
        pacer()
    assert slept == []
    now[0] = 0.1  # the batch took 100 ms: 300 ms of rest at a 25 % duty cycle
    pacer()
    assert len(slept) == 1 and abs(slept[0] - 0.3) < 1e-9
    for _ in range(4):  # an instant batch (the page cache): the minimum pause
        pacer()
    assert slept[1] == 0.001 and pacer.removed == 8


async def wait_empty(trash: Trash) -> None:
    with trio.fail_after(10):
        while trash.entries():
            await trio.sleep(0.01)


async def test_emptier_finishes_leftovers_then_wakes_on_each_throw(tmp_path: Path) -> None:
    trash = Trash(tmp_path / "trash")
    trash.prepare()
    trash.throw([tree(tmp_path / "left", 10)])  # before the emptier runs: a previous run's
    async with trio.open_nursery() as nursery:
        await nursery.start(TrashEmptier(trash).run)
        await wait_empty(trash)
        await trio.to_thread.run_sync(trash.throw, [tree(tmp_path / "new", 600)])
        await wait_empty(trash)
        assert trash.pending().entries == 0
        nursery.cancel_scope.cancel()
    assert trash.notify() is None  # unhooked


async def test_a_cancelled_emptier_leaves_the_entry_for_the_next_start(
        tmp_path: Path) -> None:
    trash = Trash(tmp_path / "trash")
    trash.prepare()
    [name] = trash.throw([tree(tmp_path / "big", 2000)])
    with trio.move_on_after(0.1):  # batches of 10 files, then 20 ms of rest at least
        await TrashEmptier(trash, batch=10, duty=0.01).run()
    assert trash.entries() == [name]
    left = len(list((tmp_path / "trash" / name / "d").iterdir()))
    assert 0 < left < 2000  # stopped part-way, in a pause
    again = Trash(tmp_path / "trash")
    again.prepare()
    async with trio.open_nursery() as nursery:
        await nursery.start(TrashEmptier(again).run)
        await wait_empty(again)
        nursery.cancel_scope.cancel()
