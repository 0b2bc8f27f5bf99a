"""Restart policies as the supervisor applies them (no runc: a fake runtime)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from svc.engine.containers.container import Container
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
