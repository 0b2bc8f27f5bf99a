"""A container's trio objects are made on first use and behave as if always there."""

from __future__ import annotations

from svc.engine.containers.container import Container
from svc.models.containers import ContainerConfig, HostConfigBody


def _container() -> Container:
    return Container(id="c" * 64, name="/c", created_ns=1, path="sh", args=[],
                     config=ContainerConfig(), host_config=HostConfigBody(), image_id="x")


def test_notify_wakes_who_waits_and_arms_a_new_event() -> None:
    c = _container()
    c.notify()  # nobody waits: nothing made
    assert c._changed is None
    changed = c.changed
    assert c.changed is changed
    c.notify()
    assert changed.is_set()
    assert not c.changed.is_set() and c.changed is not changed


def test_locks_and_hub_are_made_once() -> None:
    c = _container()
    assert c.lock is c.lock and c.mount_lock is c.mount_lock and c.lock is not c.mount_lock
    assert c.hub is c.hub
