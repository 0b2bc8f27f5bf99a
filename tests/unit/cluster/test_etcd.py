"""The etcd adapter against a real etcd (Debian's etcd-server) started by the test."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator, Iterator

import pytest
import trio

from svc.cluster.etcd import (
    Compacted,
    Compare,
    Etcd,
    EtcdError,
    Unavailable,
    WatchEvent,
    delete_op,
    put_op,
    range_op,
)
from tests.support.etcdd import EtcdServer, free_port, running_etcd


@pytest.fixture(scope="module")
def server() -> Iterator[EtcdServer]:
    with running_etcd() as etcd:
        yield etcd


@pytest.fixture
async def etcd(server: EtcdServer, request: pytest.FixtureRequest) -> AsyncIterator[Etcd]:
    client = Etcd([server.endpoint], timeout=2.0)
    try:
        yield client
    finally:
        await client.delete(_prefix(request), prefix=True)
        await client.aclose()


def _prefix(request: pytest.FixtureRequest) -> str:
    return f"/t/{request.node.name}/"


async def test_put_get_range_and_delete(etcd: Etcd, request: pytest.FixtureRequest) -> None:
    p = _prefix(request)
    assert await etcd.get(p + "a") is None
    rev = await etcd.put(p + "a", b'{"n": 1}')
    await etcd.put(p + "b/c", b"\xff\x00binary")
    await etcd.put(p[:-1] + "x", b"outside the prefix")
    got = await etcd.get(p + "a")
    assert got is not None and got.json() == {"n": 1}
    assert got.create_revision == got.mod_revision == rev and got.version == 1
    kvs, at = await etcd.range(p)
    assert [(kv.key, kv.value) for kv in kvs] == [(p + "a", b'{"n": 1}'),
                                                  (p + "b/c", b"\xff\x00binary")]
    assert at >= rev
    assert await etcd.delete(p, prefix=True) == 2
    assert (await etcd.range(p))[0] == []
    assert await etcd.delete(p[:-1] + "x") == 1


async def test_create_is_compare_and_swap_one_of_many_wins(
        etcd: Etcd, request: pytest.FixtureRequest) -> None:
    key = _prefix(request) + "vni/4097"
    winners: list[int] = []

    async def claim(who: int) -> None:
        if await etcd.create(key, str(who).encode()):
            winners.append(who)

    async with trio.open_nursery() as nursery:
        for who in range(20):
            nursery.start_soon(claim, who)
    assert len(winners) == 1
    kv = await etcd.get(key)
    assert kv is not None and kv.value == str(winners[0]).encode()


async def test_replace_and_delete_only_at_the_revision_read(
        etcd: Etcd, request: pytest.FixtureRequest) -> None:
    key = _prefix(request) + "pool"
    await etcd.put(key, b"1")
    kv = await etcd.get(key)
    assert kv is not None
    assert await etcd.replace(key, b"2", kv.mod_revision)
    assert not await etcd.replace(key, b"3", kv.mod_revision)  # a stale read loses
    assert not await etcd.delete_if(key, kv.mod_revision)
    now = await etcd.get(key)
    assert now is not None and now.value == b"2"
    assert await etcd.delete_if(key, now.mod_revision)
    assert await etcd.get(key) is None


async def test_a_transaction_answers_its_ranges(etcd: Etcd,
                                                request: pytest.FixtureRequest) -> None:
    p = _prefix(request)
    await etcd.put(p + "k", b"v")
    result = await etcd.txn([Compare(p + "k", "VALUE", b"v")],
                            [put_op(p + "k", b"w"), range_op(p, prefix=True)],
                            [delete_op(p + "k")])
    assert result.succeeded
    assert [kv.value for kv in result.ranges[0]] == [b"w"]
    failed = await etcd.txn([Compare(p + "k", "VALUE", b"v")], [put_op(p + "k", b"x")],
                            [range_op(p + "k")])
    assert not failed.succeeded and failed.ranges[0][0].value == b"w"


async def test_a_lease_keeps_its_keys_while_renewed_and_drops_them_after(
        etcd: Etcd, request: pytest.FixtureRequest) -> None:
    key = _prefix(request) + "nodes/10.0.0.1:2376"
    lease = await etcd.grant(2)
    await etcd.put(key, b"alive", lease=lease)
    kv = await etcd.get(key)
    assert kv is not None and kv.lease == lease
    for _ in range(4):  # 4 s of renewals: longer than the TTL
        assert await etcd.keepalive(lease) == 2
        await trio.sleep(1)
    assert await etcd.get(key) is not None
    with trio.fail_after(10):
        while await etcd.get(key) is not None:  # no renewal: gone after the TTL
            await trio.sleep(0.2)
    assert await etcd.keepalive(lease) == 0
    with pytest.raises(EtcdError, match="lease not found"):
        await etcd.put(key, b"late", lease=lease)


async def test_revoke_drops_the_keys_at_once(etcd: Etcd,
                                             request: pytest.FixtureRequest) -> None:
    key = _prefix(request) + "n"
    lease = await etcd.grant(60)
    await etcd.put(key, b"x", lease=lease)
    await etcd.revoke(lease)
    assert await etcd.get(key) is None
    await etcd.revoke(lease)  # twice: nothing to do


async def test_a_watch_delivers_from_its_revision(etcd: Etcd,
                                                  request: pytest.FixtureRequest) -> None:
    p = _prefix(request)
    first = await etcd.put(p + "a", b"1")
    await etcd.put(p + "b", b"2")
    await etcd.delete(p + "a")
    seen: list[WatchEvent] = []
    with trio.fail_after(10):
        async for event in etcd.watch(p, first):
            seen.append(event)
            if len(seen) == 3:
                break
    assert [(e.kind, e.kv.key, e.kv.value) for e in seen] == [
        ("put", p + "a", b"1"), ("put", p + "b", b"2"), ("delete", p + "a", b"")]
    assert seen[0].revision == first


async def test_a_watch_resumes_after_etcd_restarts_without_loss_or_repeats(
        server: EtcdServer, etcd: Etcd, request: pytest.FixtureRequest) -> None:
    p = _prefix(request)
    start = await etcd.put(p + "0", b"0")
    seen: list[str] = []
    got_one, got_all = trio.Event(), trio.Event()

    async def follow() -> None:
        async for event in etcd.watch(p, start):
            seen.append(event.kv.key.removeprefix(p))
            got_one.set()
            if len(seen) == 6:
                got_all.set()
                return

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow)
            await got_one.wait()
            await trio.to_thread.run_sync(server.kill)
            await trio.sleep(0.5)  # the watch finds nobody for a while
            await trio.to_thread.run_sync(server.start)
            for i in range(1, 6):
                await etcd.put(p + str(i), b"x")
            await got_all.wait()
    assert seen == ["0", "1", "2", "3", "4", "5"]


async def test_a_watch_from_a_compacted_revision_says_so(
        server: EtcdServer, etcd: Etcd, request: pytest.FixtureRequest) -> None:
    p = _prefix(request)
    old = await etcd.put(p + "a", b"1")
    now = await etcd.put(p + "a", b"2")
    await etcd.call("kv/compaction", {"revision": str(now), "physical": True})
    with pytest.raises(Compacted) as err, trio.fail_after(10):
        async for _ in etcd.watch(p, old):
            pass
    assert err.value.revision >= now


async def test_no_endpoint_answering_is_unavailable_and_a_dead_one_is_skipped(
        server: EtcdServer, request: pytest.FixtureRequest) -> None:
    dead = f"127.0.0.1:{free_port()}"
    lone = Etcd([dead], timeout=1.0)
    try:
        with pytest.raises(Unavailable, match=f"etcd unreachable: http://{dead}"):
            await lone.get("/x")
        with pytest.raises(Unavailable):
            async for _ in lone.watch("/x", 1, patient=False):
                pass
    finally:
        await lone.aclose()
    both = Etcd([dead, server.endpoint], timeout=1.0)
    try:
        await both.put(_prefix(request) + "k", b"v")
        assert both.urls[both._next].endswith(server.endpoint)  # the next call goes there
        kv = await both.get(_prefix(request) + "k")
        assert kv is not None and kv.value == b"v"
        await both.delete(_prefix(request), prefix=True)
    finally:
        await both.aclose()


def test_etcd_reports_itself_healthy(server: EtcdServer) -> None:
    with urllib.request.urlopen(f"http://{server.endpoint}/health", timeout=2) as r:
        assert json.loads(r.read())["health"] == "true"
