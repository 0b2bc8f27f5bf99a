"""A deferred step's image (a COPY laid out in place) is made in the background only once it
is wanted: when the next step's container runs (``Pending.wanted``) or a step waits for it
(``Job.settle``); a build without a background nursery makes it at once."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from svc.engine.builder.job import Job, Pending
from svc.storage.layers import StagedLayer


def _job() -> Job:
    spec: Any = SimpleNamespace(buildargs={}, nocache=True)
    unused: Any = None
    return Job(spec, unused, unused, images=unused, containers=unused, puller=unused)


def _staged(tmp_path: Path) -> StagedLayer:
    return StagedLayer(tmp_path / "tmp-x", "", 0, 0, link="L")


class Maker:
    def __init__(self) -> None:
        self.started = trio.Event()
        self.image: Any = SimpleNamespace(id="sha256:" + "ab" * 32, short="abababababab")

    async def __call__(self, pending: Pending) -> Any:
        self.started.set()
        return self.image


async def test_made_once_a_step_waits_for_it(tmp_path: Path) -> None:
    job, make = _job(), Maker()
    async with trio.open_nursery() as background:
        job.background = background
        await job.defer(SimpleNamespace(id="parent"), _staged(tmp_path), make)  # type: ignore[arg-type]
        await trio.testing.wait_all_tasks_blocked()
        assert not make.started.is_set()  # nothing wants it yet: the next step starts first
        await job.settle()
    assert make.started.is_set()
    assert job.image is make.image and job.pending is None


async def test_made_once_the_next_container_runs(tmp_path: Path) -> None:
    job, make = _job(), Maker()
    async with trio.open_nursery() as background:
        job.background = background
        await job.defer(SimpleNamespace(id="parent"), _staged(tmp_path), make)  # type: ignore[arg-type]
        pending = job.pending
        assert pending is not None
        await trio.testing.wait_all_tasks_blocked()
        assert not make.started.is_set()
        pending.wanted.set()  # what a RUN on the staged layer does once its command runs
        await pending.done.wait()
    assert pending.image is make.image


async def test_made_at_once_without_a_background(tmp_path: Path) -> None:
    job, make = _job(), Maker()
    await job.defer(SimpleNamespace(id="parent"), _staged(tmp_path), make)  # type: ignore[arg-type]
    assert make.started.is_set()
    assert job.pending is not None and job.pending.done.is_set()
