"""The restore logic at daemon start, against a fake runtime and runner (no runc): nothing
runs without a supervisor, exit codes say what happened, restart policies apply."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, cast

import pytest
import trio

from svc.engine.containers.container import Container
from svc.engine.containers.registry import ContainerRegistry
from svc.engine.containers.restore import ContainerRestore
from svc.engine.containers.run import Runner
from svc.engine.containers.state import State
from svc.models.containers import ContainerConfig
from svc.models.containers import HostConfigBody as HostConfig
from tests.fakes.runner import FakeRunner
from tests.fakes.runtime import FakeRuntime


def _container(cid: str, status: State, policy: str = "no", started: bool = True) -> Container:
    c = Container(id=cid, name=f"/{cid}", created_ns=1, path="sh", args=[],
                  config=ContainerConfig(), host_config=HostConfig.model_validate(
                      {"RestartPolicy": {"Name": policy}}),
                  image_id="sha256:x")
    c.state.status = status
    c.has_been_started = started
    return c


async def _restore(tmp_path: Path, runtime: FakeRuntime, *containers: Container,
                   ) -> tuple[FakeRunner, list[str], list[str]]:
    registry = ContainerRegistry()
    for c in containers:
        registry.add(c)
    runner = FakeRunner()
    saved: list[str] = []
    removed: list[str] = []

    async def save(c: Container) -> None:
        saved.append(c.id)

    async def finish_remove(c: Container) -> None:
        removed.append(c.id)

    restorer = ContainerRestore(registry, runtime, cast(Runner, cast(Any, runner)), tmp_path,
                                save, finish_remove)
    async with trio.open_nursery() as nursery:
        await restorer.restore(nursery)
    return runner, saved, removed


async def test_running_ones_are_killed_and_recorded_as_exited(tmp_path: Path) -> None:
    alive = _container("a" * 64, State.RUNNING)
    gone = _container("b" * 64, State.PAUSED)
    runtime = FakeRuntime({alive.id: "running"})
    runner, saved, _ = await _restore(tmp_path, runtime, alive, gone)
    assert (alive.state.status, alive.state.exit_code) == (State.EXITED, 137)
    assert (gone.state.status, gone.state.exit_code) == (State.EXITED, 255)
    assert "daemon was not running" in gone.state.error
    assert ("delete", alive.id) in runtime.calls
    assert sorted(saved) == sorted([alive.id, gone.id])
    assert sorted(runner.torn_down) == sorted([alive.id, gone.id])
    assert runner.launched == []


async def test_restart_policies_bring_back_what_they_should(tmp_path: Path) -> None:
    always = _container("1" * 64, State.RUNNING, "always")
    unless = _container("2" * 64, State.EXITED, "unless-stopped")
    stopped_by_hand = _container("3" * 64, State.EXITED, "unless-stopped")
    stopped_by_hand.manually_stopped = True
    never_started = _container("4" * 64, State.CREATED, "always", started=False)
    runner, _, _ = await _restore(tmp_path, FakeRuntime(), always, unless, stopped_by_hand,
                                  never_started)
    assert sorted(runner.launched) == sorted([always.id, unless.id])


async def test_an_interrupted_removal_is_finished(tmp_path: Path) -> None:
    c = _container("5" * 64, State.REMOVING)
    runner, _, removed = await _restore(tmp_path, FakeRuntime(), c)
    assert removed == [c.id] and ("destroy", c.id) in runner.events


async def test_a_build_view_a_crash_left_mounted_is_unmounted(tmp_path: Path) -> None:
    """A COPY's read-only look-up view (``Runner.image_view``) mounted when the daemon died."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    c = _container("6" * 64, State.CREATED, started=False)
    c.dir = tmp_path / c.id
    c.view_dir.mkdir(parents=True)
    await trio.run_process(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs",
                            str(c.view_dir)])
    try:
        runner, _, _ = await _restore(tmp_path, FakeRuntime(), c)
        assert not os.path.ismount(c.view_dir)
        assert runner.torn_down == []  # nothing else of it was left
    finally:
        if os.path.ismount(c.view_dir):
            await trio.run_process(["umount", str(c.view_dir)], check=False)
