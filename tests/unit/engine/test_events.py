from __future__ import annotations

import time

import trio

from svc.engine.events import SCAN_EVERY, SUBSCRIBER_LAG, Event, EventBus, EventFilter


def ev(type_: str = "container", action: str = "start", actor: str = "abc",
       **attrs: str) -> Event:
    return Event(type_, action, actor, dict(attrs), time.time_ns())


def test_filter_rules() -> None:
    c = ev(actor="abcdef", name="web", image="repo/app:1", tier="db")
    assert EventFilter({}).match(c)
    assert EventFilter({"container": ["abc"]}).match(c)
    assert EventFilter({"container": ["web"]}).match(c)
    assert EventFilter({"container": ["/web"]}).match(c)
    assert not EventFilter({"container": ["xyz"]}).match(c)
    assert EventFilter({"image": ["repo/app"]}).match(c)
    assert EventFilter({"image": ["repo/app:1"]}).match(c)
    assert not EventFilter({"image": ["repo/app:2"]}).match(c)
    assert EventFilter({"label": ["tier"], "event": ["start"]}).match(c)
    assert not EventFilter({"label": ["tier=web"]}).match(c)
    assert not EventFilter({"type": ["image"]}).match(c)
    img = ev("image", "tag", "sha256:1", name="repo/app:latest")
    assert EventFilter({"image": ["repo/app"]}).match(img)
    assert EventFilter({"image": ["sha256:1"]}).match(img)
    assert not EventFilter({"container": ["sha"]}).match(img)
    vol = ev("volume", "create", "data", driver="local")
    assert EventFilter({"volume": ["data"]}).match(vol)
    assert not EventFilter({"network": ["data"]}).match(vol)


async def _drain(sub) -> list[Event]:  # type: ignore[no-untyped-def]
    out: list[Event] = []
    async for batch in sub.batches():
        out += batch
    return out


async def test_replay_then_live_without_gap_or_duplicate() -> None:
    bus = EventBus()
    t0 = time.time_ns()
    bus.publish("container", "create", "a")
    sub = bus.subscribe(since_ns=t0)
    bus.publish("container", "start", "a")
    bus.close()
    got = await _drain(sub)
    assert [e.action for e in got] == ["create", "start"]


async def test_until_in_the_past_replays_only() -> None:
    bus = EventBus()
    bus.publish("container", "create", "a")
    now = time.time_ns()
    sub = bus.subscribe(since_ns=0, until_ns=now)
    assert bus.listeners == 0
    bus.publish("container", "die", "a")
    assert [e.action for e in await _drain(sub)] == ["create"]


async def test_until_in_the_future_ends_at_until() -> None:
    bus = EventBus()
    sub = bus.subscribe(until_ns=time.time_ns() + 200_000_000)
    bus.publish("container", "start", "x")
    with trio.fail_after(2):
        got = await _drain(sub)
    assert [e.action for e in got] == ["start"]


async def test_slow_subscriber_is_cut_off_others_unaffected() -> None:
    bus = EventBus()
    slow = bus.subscribe()
    fast = bus.subscribe({"event": ["keep"]})
    got_fast: list[str] = []

    async def consume_fast() -> None:
        async for batch in fast.batches():
            got_fast.extend(e.action for e in batch)

    async with trio.open_nursery() as n:
        n.start_soon(consume_fast)
        for i in range(SUBSCRIBER_LAG + 10):
            bus.publish("container", "spam", "a")
            if i % 100 == 0:
                await trio.lowlevel.checkpoint()
        bus.publish("container", "keep", "a")
        # the slow subscriber never read: on its next read it is cut off with a reason
        got_slow = await _drain(slow)
        assert got_slow == [] and slow.error and "fell more than" in slow.error
        assert bus.listeners == 1
        bus.close()
    assert got_fast == ["keep"]
    assert len(bus._log) <= 2 * SUBSCRIBER_LAG  # memory stays bounded


async def test_a_subscriber_within_the_limit_gets_everything() -> None:
    bus = EventBus()
    sub = bus.subscribe()
    for i in range(SUBSCRIBER_LAG):
        bus.publish("container", "n", str(i))
    bus.close()
    got = await _drain(sub)
    assert [e.actor_id for e in got] == [str(i) for i in range(SUBSCRIBER_LAG)]
    assert sub.error == "the daemon is shutting down"


async def test_many_subscribers_share_one_log() -> None:
    bus = EventBus()
    subs = [bus.subscribe() for _ in range(50)]
    for i in range(10_000):
        bus.publish("container", "n", str(i))
        if i % 500 == 0:
            await trio.lowlevel.checkpoint()
    assert len(bus._log) < 2 * SUBSCRIBER_LAG
    assert bus.max_lag() == 10_000  # nobody read: all will be cut off on their next read
    assert all(s.lag() == 10_000 for s in subs)


async def test_close_releases_and_counts() -> None:
    bus = EventBus()
    subs = [bus.subscribe() for _ in range(3)]
    assert bus.listeners == 3
    subs[0].close()
    assert bus.listeners == 2
    bus.close()
    assert bus.listeners == 0
    assert subs[1].error == "the daemon is shutting down"


def test_records_round_trip() -> None:
    e = ev(name="x")
    assert Event.from_record(e.to_record()).to_record() == e.to_record()


def test_a_subscriber_stuck_in_a_write_is_cut_off_by_the_bus() -> None:
    """Its consumer waits in a write and never looks at its lag: publishing finds it (every
    SCAN_EVERY events) once it is more than SUBSCRIBER_LAG behind and tells it."""
    bus = EventBus()
    stuck, idle = bus.subscribe(), bus.subscribe()
    cuts: list[str] = []
    stuck.sending = True
    stuck.on_cut = lambda: cuts.append("stuck")
    idle.on_cut = lambda: cuts.append("idle")
    for _ in range(SUBSCRIBER_LAG):
        bus.publish("container", "start", "x")
    assert cuts == [] and bus.listeners == 2  # at the lag, not beyond: kept
    for _ in range(SCAN_EVERY):
        bus.publish("container", "start", "x")
    assert cuts == ["stuck"] and bus.listeners == 1
    assert stuck.error is not None and "fell more than 4096 events behind" in stuck.error
    assert idle.error is None  # not writing: it finds its lag itself on its next read


async def test_the_log_keeps_the_replay_window_and_what_subscribers_still_need() -> None:
    """Without subscribers only the newest ``keep`` are needed (replay); a subscriber that
    has not read yet keeps its events in the log, up to the cut-off."""
    bus = EventBus(keep=100)
    for i in range(5000):
        bus.publish("container", "n", str(i))
    assert len(bus._log) < 2 * 100
    replay = bus.subscribe(since_ns=0, until_ns=time.time_ns())
    assert [e.actor_id for e in replay.backlog] == [str(i) for i in range(4900, 5000)]
    slow = bus.subscribe()
    for i in range(3000):
        bus.publish("container", "m", str(i))
    bus.close()
    assert [e.actor_id for e in await _drain(slow)] == [str(i) for i in range(3000)]
