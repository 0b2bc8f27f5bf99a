"""The scavenger gives a freed burst of C-heap memory back to the kernel, and leaves a quiet
process alone (``svc.memory``), measured on this process's own RSS."""

from __future__ import annotations

import resource
import subprocess
import sys
from functools import partial

import pytest
import trio

from svc.memory import Heap, rss_bytes, scavenge

MiB = 1 << 20


class CountingHeap(Heap):
    trims = 0

    def trim(self) -> None:
        self.trims += 1
        super().trim()


def counting_heap() -> CountingHeap:
    heap = CountingHeap.open()
    if heap is None:
        pytest.skip("this C library has no mallinfo2/malloc_trim (not glibc)")
    assert isinstance(heap, CountingHeap)
    return heap


async def test_a_freed_burst_is_given_back() -> None:
    heap = counting_heap()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(scavenge, heap, interval=0.05, slack=4 * MiB))
        await trio.sleep(0.2)
        keep: list[bytes] = []
        junk: list[bytes] = []
        for i in range(200_000):  # 600-byte objects come from malloc, not pymalloc
            (keep if i % 50 == 0 else junk).append(bytes(600))
        peak = rss_bytes()
        junk.clear()  # ~120 MiB freed, but scattered between the kept objects
        with trio.fail_after(10):
            while rss_bytes() > peak - 80 * MiB:
                await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert heap.trims >= 1
    assert len(keep) == 4000


async def test_a_quiet_process_is_not_trimmed() -> None:
    heap = counting_heap()
    with trio.move_on_after(0.6):
        await scavenge(heap, interval=0.05, slack=8 * MiB)
    assert heap.trims == 0


def test_a_tuned_heap_reuses_freed_stream_buffers() -> None:
    """What ``logs -f`` does per chunk (a read, its records joined, its frames) must not fault
    in fresh pages each time once the thresholds are fixed."""
    heap = counting_heap()
    assert heap.tune()

    def stream(chunks: int) -> None:
        for _ in range(chunks):
            read = b"z" * (1 << 20)
            joined = read + b"x" * (70 << 10)
            frames = joined + b"y" * (8 << 10)
            del read, joined, frames

    stream(5)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    stream(100)  # 300 MB through the heap
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert faults < 1000, f"{faults} page faults: freed buffers were given back and refetched"


FREEZE_PROBE = """
import gc, weakref
import svc.daemon  # what the daemon has imported when it freezes
from svc.memory import freeze_imports

class Node:
    pass

before = Node()
before.me = before  # a cycle made before the freeze: never walked again
freeze_imports()
frozen = gc.get_freeze_count()
after = Node()
after.me = after  # a cycle made after it: still collected
gone = weakref.ref(after)
del after
gc.collect()
print(frozen, gone() is None, gc.get_freeze_count() == frozen)
"""


def test_freeze_imports_leaves_later_cycles_collectable() -> None:
    """The daemon's imports go to the permanent generation (the full collection no longer
    walks them); a reference cycle made afterwards is collected as before."""
    out = subprocess.run([sys.executable, "-c", FREEZE_PROBE], check=True, capture_output=True,
                         text=True).stdout.split()
    frozen, collected, unchanged = int(out[0]), out[1] == "True", out[2] == "True"
    assert frozen > 50_000, f"only {frozen} objects were frozen"
    assert collected
    assert unchanged
