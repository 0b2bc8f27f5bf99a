"""The bus's fan-out (svc.engine.fanout): caught-up subscribers with a direct writer get
their events from one task, or from ``publish`` itself for the first event after a quiet
spell; a writer that cannot take a batch hands its subscriber back to its own task, with
nothing lost, repeated or reordered; a writer that raises never reaches the publisher."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from svc.engine import fanout
from svc.engine.events import Event, EventBus, Subscription


class Writer:
    """A direct writer that takes ``room`` batches, then refuses (a full socket)."""

    def __init__(self, room: int = 1 << 30) -> None:
        self.room = room
        self.got: list[str] = []
        self.refused: list[str] = []  # what the task must deliver instead (the "rest")

    def __call__(self, batch: list[Event]) -> bool:
        ids = [ev.actor_id for ev in batch]
        if self.room <= 0:
            self.refused += ids
            return False
        self.room -= 1
        self.got += ids
        return True


async def consume(sub: Subscription, writer: Writer, out: list[str]) -> None:
    """A consumer as the events route is one: writes the refused rest, then its batches."""
    async for batch in sub.batches():
        out += writer.refused
        writer.refused = []
        out += [ev.actor_id for ev in batch]


async def test_direct_subscribers_get_every_event_from_the_fan_out() -> None:
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        writers, outs = [Writer() for _ in range(20)], [[] for _ in range(20)]
        for w, out in zip(writers, outs, strict=True):
            sub = bus.subscribe()
            sub.direct = w
            nursery.start_soon(consume, sub, w, out)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(50):
            bus.publish("container", "start", f"c{i}")
            if i % 7 == 0:
                await trio.lowlevel.checkpoint()
        await trio.testing.wait_all_tasks_blocked()
        for w, out in zip(writers, outs, strict=True):
            assert w.got == [f"c{i}" for i in range(50)] and out == []
        nursery.cancel_scope.cancel()


async def test_a_refused_write_hands_the_subscriber_back_in_order() -> None:
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        w, out = Writer(room=2), []
        sub = bus.subscribe({"type": ["container"]})
        sub.direct = w
        nursery.start_soon(consume, sub, w, out)
        await trio.testing.wait_all_tasks_blocked()
        for i in range(6):
            bus.publish("container", "die", f"c{i}")
            bus.publish("image", "tag", f"i{i}")  # filtered out
            await trio.testing.wait_all_tasks_blocked()
        # two batches went directly; the third was refused and the task delivered it; the
        # task then waited with the others held again (and refused again: room is 0)
        assert w.got == ["c0", "c1"]
        assert out + w.refused == ["c2", "c3", "c4", "c5"]
        nursery.cancel_scope.cancel()


async def test_closing_the_bus_releases_held_subscribers() -> None:
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        sub = bus.subscribe()
        sub.direct = Writer()
        ended = trio.Event()

        async def run() -> None:
            async for _ in sub.batches():
                pass
            ended.set()

        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        bus.close()
        with trio.fail_after(2):
            await ended.wait()
        assert sub.error == "the daemon is shutting down"
        nursery.cancel_scope.cancel()


async def test_an_adopted_subscriber_is_handed_back_by_a_call_once() -> None:
    """An adopted subscriber has no task: the fan-out writes its events, and the first batch
    its writer refuses, or the subscription's end, calls its hand-back, once; a task started
    then delivers the rest, in order. A forgotten one is neither written to nor called."""
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        calls: list[str] = []
        subs = {name: bus.subscribe() for name in ("full", "ends", "gone")}
        writers = {name: Writer(room=2 if name == "full" else 1 << 30) for name in subs}
        out: list[str] = []
        for name, sub in subs.items():
            sub.direct = writers[name]

            def back(name: str = name) -> None:
                calls.append(name)
                if name == "full":
                    nursery.start_soon(consume, subs[name], writers[name], out)

            bus.fanout.adopt(sub, back)
        bus.fanout.forget(subs["gone"])
        for i in range(5):
            bus.publish("container", "start", f"c{i}")
            await trio.testing.wait_all_tasks_blocked()
        assert calls == ["full"]
        assert writers["full"].got == ["c0", "c1"]
        assert out + writers["full"].refused == ["c2", "c3", "c4"]
        assert writers["ends"].got == [f"c{i}" for i in range(5)]
        assert writers["gone"].got == []
        bus.close()
        assert calls == ["full", "ends"]
        assert subs["ends"].error == "the daemon is shutting down"
        nursery.cancel_scope.cancel()


async def test_the_first_event_after_a_quiet_spell_is_written_as_it_is_published() -> None:
    """Held subscribers get an event in ``publish`` itself (no checkpoint) when no round is
    pending or recent; the rest of a burst follows in one round; after a quiet spell the
    next event goes out at once again."""
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        batches: list[list[str]] = []
        sub = bus.subscribe()
        sub.direct = lambda batch: batches.append([ev.actor_id for ev in batch]) or True
        nursery.start_soon(consume, sub, Writer(), [])
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(2 * fanout.QUIET_S)
        bus.publish("container", "start", "a")
        assert batches == [["a"]]  # (no checkpoint since the publish)
        for name in "bcd":
            bus.publish("container", "start", name)
        assert batches == [["a"]]
        await trio.testing.wait_all_tasks_blocked()
        assert batches == [["a"], ["b", "c", "d"]]
        await trio.sleep(2 * fanout.QUIET_S)
        bus.publish("container", "stop", "e")
        assert batches == [["a"], ["b", "c", "d"], ["e"]]
        nursery.cancel_scope.cancel()


async def test_a_writer_that_raises_never_reaches_the_publisher_nor_the_fan_out(
        caplog: pytest.LogCaptureFixture) -> None:
    """Its subscriber is handed back (to its task, which deals with it); the others get
    every event, from publish and from the task's rounds alike."""
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        broken, fine = bus.subscribe(), bus.subscribe()

        def fails(batch: list[Event]) -> bool:
            raise RuntimeError("a bug")

        broken.direct, writer = fails, Writer()
        fine.direct = writer
        backs: list[str] = []
        bus.fanout.adopt(broken, lambda: backs.append("broken"))
        bus.fanout.adopt(fine, lambda: backs.append("fine"))
        await trio.sleep(2 * fanout.QUIET_S)
        bus.publish("container", "start", "c0")  # (publish_now: does not raise)
        assert "writing events to a subscriber failed" in caplog.text
        assert backs == ["broken"] and writer.got == ["c0"]
        bus.fanout.adopt(broken, lambda: backs.append("broken"))  # (as if taken back)
        for i in range(1, 4):  # (a burst: the task's round meets the writer too)
            bus.publish("container", "start", f"c{i}")
        await trio.testing.wait_all_tasks_blocked()
        assert backs == ["broken", "broken"]
        assert writer.got == ["c0", "c1", "c2", "c3"]
        nursery.cancel_scope.cancel()


async def test_past_a_number_of_held_subscribers_the_task_writes_after_the_publisher(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "PUBLISH_NOW_MAX", 1)
    bus = EventBus()
    async with trio.open_nursery() as nursery:
        await nursery.start(bus.run)
        writers = [Writer(), Writer()]
        for w in writers:
            sub = bus.subscribe()
            sub.direct = w
            bus.fanout.adopt(sub, lambda: None)
        await trio.sleep(2 * fanout.QUIET_S)
        bus.publish("container", "start", "c0")
        assert [w.got for w in writers] == [[], []]
        await trio.testing.wait_all_tasks_blocked()
        assert [w.got for w in writers] == [["c0"], ["c0"]]
        nursery.cancel_scope.cancel()
