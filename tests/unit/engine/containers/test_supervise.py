"""Restart policies as the supervisor applies them (no runc: a fake runtime)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
import trio

from svc.engine.containers.container import Container, Live
from svc.engine.containers.state import State
from svc.engine.containers.supervise import Supervisor
from svc.models.containers import ContainerConfig
from svc.models.containers import HostConfigBody as HostConfig
from svc.runtime.cgroups import CgroupV1
from tests.fakes.runtime import FakeRuntime


async def _nothing(c: Container) -> None:
    pass


def _supervisor() -> Supervisor:
    return Supervisor(FakeRuntime(), cast(CgroupV1, cast(Any, None)), _nothing, _nothing,
                      event=lambda *a, **k: None, cgroup_of=lambda c: "", teardown=_nothing,
                      launch=_nothing)


def _container(policy: dict[str, Any]) -> Container:
    c = Container(id="c" * 64, name="/c", created_ns=1, path="sh", args=[],
                  config=ContainerConfig(), host_config=HostConfig.model_validate(
                      {"RestartPolicy": policy}),
                  image_id="sha256:x")
    c.state.status = State.EXITED
    return c


@pytest.mark.parametrize("policy,code,count,stopped,want", [
    ({"Name": "no"}, 1, 0, False, False),
    ({}, 1, 0, False, False),
    ({"Name": "always"}, 0, 0, False, True),
    ({"Name": "always"}, 0, 0, True, False),  # stopped by hand ends the loop
    ({"Name": "unless-stopped"}, 3, 10, False, True),
    ({"Name": "on-failure"}, 0, 0, False, False),
    ({"Name": "on-failure"}, 2, 0, False, True),
    ({"Name": "on-failure", "MaximumRetryCount": 3}, 2, 2, False, True),
    ({"Name": "on-failure", "MaximumRetryCount": 3}, 2, 3, False, False),
])
def test_wants_restart(policy: dict[str, Any], code: int, count: int, stopped: bool,
                       want: bool) -> None:
    c = _container(policy)
    c.restart_count, c.manually_stopped = count, stopped
    assert _supervisor().wants_restart(c, code) is want


def test_a_container_being_removed_is_not_restarted() -> None:
    c = _container({"Name": "always"})
    c.state.status = State.REMOVING
    assert _supervisor().wants_restart(c, 1) is False


class _Eof:
    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return b""


class _NoCgroups:
    def read(self, *path: str) -> str:
        raise FileNotFoundError("no cgroup in a unit test")


class _Pipes:
    stdout = stderr = _Eof()

    async def aclose(self) -> None:
        pass


def _running(teardown: Callable[[Container], Awaitable[None]]) -> tuple[Supervisor, Container]:
    """A supervisor with ``teardown`` and a running container without a log."""
    sup = Supervisor(FakeRuntime(), cast(CgroupV1, _NoCgroups()), _nothing, _nothing,
                     event=lambda *a, **k: None, cgroup_of=lambda c: "", teardown=teardown,
                     launch=_nothing)
    c = _container({})
    c.host_config.LogConfig.Type = "none"
    c.state.status = State.RUNNING
    return sup, c


async def test_a_process_that_exits_at_once_is_not_torn_down_under_runc_start(
        tmp_path: Any) -> None:
    """``runc start`` removes the exec fifo after the process runs: a ``true`` that has
    exited by then must not have its runc state deleted first (runc start then failed with
    'remove .../exec.fifo: no such file or directory')."""
    torn_down = trio.Event()

    async def teardown(c: Container) -> None:
        torn_down.set()

    sup, c = _running(teardown)
    pid = os.posix_spawnp("true", ["true"], os.environ)  # noqa: ASYNC221 (returns at once)
    live = Live(pid=pid, launched=trio.Event())
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.supervise, c, live, cast(Any, _Pipes()))
        await trio.sleep(0.3)  # the process has exited; runc start has not returned
        assert not torn_down.is_set()
        live.launched.set()
        with trio.fail_after(5):
            await live.exited.wait()
    assert torn_down.is_set()


async def test_the_end_of_the_process_is_known_before_the_teardown(tmp_path: Any) -> None:
    """``Live.ended`` (and the exit code) come as soon as the process has exited, while the
    teardown still runs: the builder commits a RUN step's container from there. The
    recorded exit (``exited``, the state) waits for the teardown."""
    release = trio.Event()

    async def teardown(c: Container) -> None:
        await release.wait()

    sup, c = _running(teardown)
    pid = os.posix_spawnp("sh", ["sh", "-c", "exit 3"], os.environ)  # noqa: ASYNC221
    live = Live(pid=pid, launched=trio.Event())
    live.launched.set()
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.supervise, c, live, cast(Any, _Pipes()))
        with trio.fail_after(5):
            await live.ended.wait()
        assert live.code == 3
        assert not live.exited.is_set() and c.state.status is State.RUNNING
        release.set()
        with trio.fail_after(5):
            await live.exited.wait()
    assert c.state.exit_code == 3 and c.state.status is State.EXITED
