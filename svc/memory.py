"""Giving memory back: the C heap is trimmed after bursts, as Go's scavenger does for dockerd.

CPython hands every object over 512 bytes to glibc's malloc. A burst of them (100 event
streams, an image load, many requests at once) grows the heap; once they are freed, glibc keeps
the pages it cannot release from the top of the heap, so svcd's RSS stays at the burst's peak
(measured: 116 MiB after the 100-subscriber events benchmark, 77 MiB after ``malloc_trim``).
``malloc_trim(0)`` returns the free pages inside every arena to the kernel.

The scavenger looks every ``INTERVAL`` seconds at two cheap numbers, the process's RSS and
the bytes free inside malloc's arenas (``mallinfo2``), and trims, in a worker thread, when
either has grown by ``SLACK`` since the last trim: RSS when the heap grew (a trim in the middle
of a burst returns little), the free bytes when the burst's memory was freed. A quiet daemon
is never trimmed again, and a trim costs a few milliseconds of one worker thread.

The other half is keeping hot buffers resident while a stream runs. glibc's default thresholds
move: an allocation of 128 KiB or more is mmapped until the first such block is freed, and the
heap's top is given back once 128 KiB of it is free. A stream that allocates and frees a
megabyte per chunk (``logs -f``: a read, its records, its frames) then faulted in every page of
every buffer, sometimes for a whole run (measured: 70,000 faults and a third of the rate for
200 MB). :meth:`Heap.tune` fixes the thresholds instead (blocks up to 4 MiB come from the heap,
whose top is kept up to 8 MiB), so freed buffers are reused at once; the scavenger still gives
back what a burst left.

It also caps malloc's arenas at ``ARENAS``. glibc gives each thread that allocates while another
holds an arena's lock an arena of its own, up to 8 per core, and every arena keeps its own free
memory (up to the trim threshold at its top). The worker threads of an image load and a build
left about 4 MiB resident in arenas of their own each, all still there with 500 containers
(measured: 87.5 MiB after the images and build benchmarks, 79.6 MiB with two arenas). Python
allocates with the GIL held, so the threads hardly ever contend for an arena's lock anyway.

Where the C library is not glibc, there is nothing to call and the scavenger returns at once.

Python's own collector is the third part: its full (oldest generation) collection walks every
tracked object, and after the imports that is about 90,000 (modules, classes, functions,
pydantic's validators) that never become garbage. Each full collection took 50-70 ms with the
GIL held, and under load they came every few hundred milliseconds (seven within 1.5 s of the
100-subscriber events benchmark): every request and stream in the daemon stood still
meanwhile. :func:`freeze_imports` moves what exists before the engine loads its state into
the collector's permanent generation, which it never walks (full collections: 2-6 ms, 20 ms at
the events benchmark's peak). Reference counting still frees those objects as before; only a
reference cycle among them would never be collected, which is why the engine's records, which
a removal can turn into garbage, are made after the freeze.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os

import trio

log = logging.getLogger("svc.memory")

INTERVAL = 2.0
SLACK = 8 << 20
MMAP_THRESHOLD = 4 << 20  # blocks below this come from the heap and are reused when freed
TRIM_THRESHOLD = 8 << 20  # free() gives back the heap's top only beyond this
ARENAS = 2  # the main heap and one for the worker threads (see the module's doc)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # mallopt's (malloc.h)
_PAGE = os.sysconf("SC_PAGE_SIZE")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


class Heap:
    """glibc's malloc statistics and trim, through ctypes."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self._trim = libc.malloc_trim
        self._trim.argtypes, self._trim.restype = [ctypes.c_size_t], ctypes.c_int
        self._info = libc.mallinfo2
        self._info.argtypes, self._info.restype = [], _MallInfo2
        self._mallopt = libc.mallopt
        self._mallopt.argtypes, self._mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int

    @classmethod
    def open(cls) -> Heap | None:
        """The process's glibc heap, or None when the C library has no ``mallinfo2``."""
        try:  # the process's own symbols, as runtime/process.py opens them: no library search
            return cls(ctypes.CDLL(None))
        except (OSError, AttributeError):
            return None

    def free_bytes(self) -> int:
        """Bytes in free chunks inside the arenas (resident or not)."""
        return int(self._info().fordblks)

    def trim(self) -> None:
        self._trim(0)

    def tune(self) -> bool:
        """Fix malloc's mmap and trim thresholds and cap its arenas (see the module's doc);
        True if all took. Call it before the daemon starts threads: arenas made before stay."""
        return all([self._mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
                    self._mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                    self._mallopt(_M_ARENA_MAX, ARENAS)])


def tune_heap() -> None:
    """Tune the process's glibc heap (:meth:`Heap.tune`), if it has one."""
    heap = Heap.open()
    if heap is None:
        log.debug("no glibc malloc: its thresholds and arenas are left as they are")
    elif not heap.tune():
        log.debug("malloc refused the mmap and trim thresholds or the arena cap")


def freeze_imports() -> None:
    """Collect once, then put every object that exists now out of the collector's reach
    (see the module's doc). Call it once, after the imports and before the state is
    loaded."""
    gc.collect()
    gc.freeze()


def rss_bytes() -> int:
    """The process's resident set size (``/proc/self/statm``)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * _PAGE


async def scavenge(heap: Heap | None = None, *, interval: float = INTERVAL,
                   slack: int = SLACK,
                   task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Trim the C heap whenever RSS or the free bytes in it grew by ``slack``; runs until
    cancelled. Cancellation while a trim runs lets that trim finish in its thread (it
    holds malloc's locks only while walking the arenas)."""
    task_status.started()
    heap = heap or Heap.open()
    if heap is None:
        log.debug("no glibc malloc: freed memory is left to the C library")
        return
    rss, free = await trio.to_thread.run_sync(_sample, heap)
    while True:
        await trio.sleep(interval)
        now_rss, now_free = await trio.to_thread.run_sync(_sample, heap)
        if now_rss < rss + slack and now_free < free + slack:
            rss, free = min(rss, now_rss), min(free, now_free)  # reuse: measure from the low
            continue
        before = now_rss
        rss, free = await trio.to_thread.run_sync(_trim, heap)
        log.debug("trimmed the C heap: RSS %.1f -> %.1f MiB", before / 2**20, rss / 2**20)


def _sample(heap: Heap) -> tuple[int, int]:
    return rss_bytes(), heap.free_bytes()


def _trim(heap: Heap) -> tuple[int, int]:
    heap.trim()
    return _sample(heap)
