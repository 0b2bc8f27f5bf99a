"""Durable mount references of plugin volumes: written before Mount, taken out after Unmount,
and the Unmounts owed when the plugin's answer is unknown (a fake plugin driver)."""

from __future__ import annotations

import pytest
import trio

from svc.engine.events import EventBus
from svc.engine.volumes.base import Volume
from svc.engine.volumes.refs import MountRefs
from svc.plugins.client import PluginCallError, PluginGone, PluginTimeout, PluginUnreachable


class FakeDriver:
    """A plugin's VolumeDriver calls: what each is asked, and what to answer next."""

    def __init__(self, saved: list[list[str]]) -> None:
        self.name = "fake"
        self.calls: list[tuple[str, str, str, list[str]]] = []
        self.fail: dict[str, list[BaseException]] = {"mount": [], "unmount": []}
        self.hang = False
        self.saved = saved

    async def _call(self, method: str, name: str, cid: str) -> None:
        # what the record said when the call went out
        self.calls.append((method, name, cid, self.saved[-1] if self.saved else []))
        if self.hang:
            await trio.sleep_forever()
        if self.fail[method]:
            raise self.fail[method].pop(0)

    async def mount(self, name: str, cid: str) -> str:
        await self._call("mount", name, cid)
        return f"/plugin/{name}"

    async def unmount(self, name: str, cid: str) -> None:
        await self._call("unmount", name, cid)


class FakeDrivers:
    def __init__(self, driver: FakeDriver) -> None:
        self.d = driver

    async def driver(self, name: str) -> FakeDriver:
        return self.d


def setup() -> tuple[MountRefs, Volume, FakeDriver, list[list[str]], EventBus]:
    saved: list[list[str]] = []
    v = Volume("v", "fake")

    async def save(vol: Volume) -> None:
        saved.append(vol.record()["Mounts"])

    d = FakeDriver(saved)
    events = EventBus()
    refs = MountRefs(FakeDrivers(d), events, save, lambda: [v])  # type: ignore[arg-type]
    return refs, v, d, saved, events


async def test_recorded_before_mount_and_taken_out_after_unmount() -> None:
    refs, v, d, saved, _ = setup()
    assert await refs.mount(v, "c1") == ("/plugin/v", True)
    assert d.calls == [("mount", "v", "c1", ["c1"])]  # durable before the plugin heard
    assert await refs.mount(v, "c1") == ("/plugin/v", False)  # once per container
    await refs.unmount(v, "c1")
    assert d.calls[-1] == ("unmount", "v", "c1", ["c1"]) and saved[-1] == []
    assert v.users == set() and v.owed == set()
    await refs.unmount(v, "c1")  # idempotent
    assert len(d.calls) == 2


@pytest.mark.parametrize("exc", [PluginCallError("VolumeDriver.Mount", 500, "no"),
                                 PluginUnreachable("fake", "refused")])
async def test_a_mount_never_made_owes_nothing(exc: BaseException) -> None:
    refs, v, d, saved, _ = setup()
    d.fail["mount"] = [exc]
    with pytest.raises(type(exc)):
        await refs.mount(v, "c1")
    assert saved[-1] == [] and v.users == set() and v.owed == set()


@pytest.mark.parametrize("exc", [PluginTimeout("fake", "VolumeDriver.Mount", 2),
                                 PluginGone("VolumeDriver.Mount", 0, "went away")])
async def test_a_mount_of_unknown_outcome_owes_an_unmount(exc: BaseException) -> None:
    refs, v, d, saved, _ = setup()
    d.fail["mount"] = [exc]
    with pytest.raises(type(exc)):
        await refs.mount(v, "c1")
    assert v.owed == {"c1"} and saved[-1] == ["c1"]
    async with trio.open_nursery() as nursery:
        await nursery.start(refs.run)
        with trio.fail_after(5):
            while v.owed:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert d.calls[-1][:3] == ("unmount", "v", "c1") and saved[-1] == []


async def test_a_cancelled_mount_owes_an_unmount() -> None:
    refs, v, d, saved, _ = setup()
    d.hang = True
    with trio.move_on_after(0.1):
        await refs.mount(v, "c1")
    assert v.owed == {"c1"} and saved[-1] == ["c1"]
    d.hang = False
    # the same container mounting again sends its owed Unmount first
    assert await refs.mount(v, "c1") == ("/plugin/v", True)
    assert [c[0] for c in d.calls] == ["mount", "unmount", "mount"]
    assert v.owed == set() and v.users == {"c1"}


async def test_an_unmount_that_cannot_be_sent_is_sent_again() -> None:
    refs, v, d, saved, events = setup()
    await refs.mount(v, "c1")
    d.fail["unmount"] = [PluginUnreachable("fake", "refused"),
                         PluginTimeout("fake", "VolumeDriver.Unmount", 2)]
    await refs.unmount(v, "c1")  # never raises for the plugin's sake
    assert v.owed == {"c1"} and saved[-1] == ["c1"]
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(refs.run)
        with trio.fail_after(10):
            while v.owed:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert trio.current_time() - start >= 1.0  # a pause after the failed try
    assert [c[0] for c in d.calls] == ["mount", "unmount", "unmount", "unmount"]
    assert saved[-1] == []


async def test_a_refused_unmount_is_the_plugins_answer() -> None:
    refs, v, d, saved, _ = setup()
    await refs.mount(v, "c1")
    d.fail["unmount"] = [PluginCallError("VolumeDriver.Unmount", 500, "busy")]
    await refs.unmount(v, "c1")
    assert v.users == set() and v.owed == set() and saved[-1] == []
