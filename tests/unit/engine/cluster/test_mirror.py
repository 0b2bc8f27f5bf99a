"""A mirror of one etcd prefix: current after a read and a watch, records it cannot use
skipped without ending it, and a listener's failure never ending it either."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trio

from svc.cluster.etcd import Etcd
from svc.engine.cluster.mirror import Mirror
from tests.support.etcdd import EtcdServer, running_etcd


@pytest.fixture(scope="module")
def server() -> Iterator[EtcdServer]:
    with running_etcd() as etcd:
        yield etcd


@pytest.fixture
async def etcd(server: EtcdServer) -> AsyncIterator[Etcd]:
    client = Etcd([server.endpoint], timeout=2.0)
    try:
        yield client
    finally:
        await client.delete("/m/", prefix=True)
        await client.aclose()


async def test_the_copy_follows_and_bad_records_are_skipped(etcd: Etcd) -> None:
    await etcd.put("/m/a", b'{"n": 1}')
    await etcd.put("/m/bad", b"not json")
    mirror = Mirror(etcd, "/m/")
    seen: list[tuple[str, Any]] = []

    def listener(key: str, value: Any) -> None:
        seen.append((key, value))
        if value == {"explode": True}:
            raise KeyError("Subnet")  # a record of another shape

    mirror.listeners.append(listener)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(mirror.run)
            assert mirror.items == {"a": {"n": 1}} and mirror.current
            await etcd.put("/m/x", b'{"explode": true}')
            await etcd.put("/m/b", b'{"n": 2}')
            await etcd.delete("/m/a")
            while "a" in mirror.items or "b" not in mirror.items:
                await mirror.changed()
            nursery.cancel_scope.cancel()
    assert mirror.items == {"b": {"n": 2}, "x": {"explode": True}}
    assert [k for k, _ in seen] == ["a", "x", "b", "a"]
