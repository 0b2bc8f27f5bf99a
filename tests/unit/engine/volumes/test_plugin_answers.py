"""What a volume plugin may answer, read as the engines read it; names and records."""

from __future__ import annotations

import pytest
import trio

from svc.engine.volumes.base import KeyedLock, Volume, check_name
from svc.engine.volumes.plugin import (
    Listed,
    parse_get,
    parse_list,
    parse_mountpoint,
    parse_scope,
)
from svc.errors import InvalidParameter
from svc.plugins.client import (
    PluginBadAnswer,
    PluginCallConflict,
    PluginCallError,
    PluginCallNotFound,
)


def test_err_in_a_200_is_a_refusal_of_the_kind_its_words_say() -> None:
    with pytest.raises(PluginCallNotFound, match="^VolumeDriver.Get: no such volume: v$"):
        parse_get({"Err": "no such volume: v"})
    with pytest.raises(PluginCallConflict, match="^VolumeDriver.List: volume v is in use$"):
        parse_list({"Err": "volume v is in use"})
    with pytest.raises(PluginCallError, match="^VolumeDriver.Mount: disk on fire$") as info:
        parse_mountpoint("VolumeDriver.Mount", {"Mountpoint": "/x", "Err": "disk on fire"},
                         required=True)
    assert info.value.status == 200
    assert parse_mountpoint("VolumeDriver.Path", {"Mountpoint": "/p", "Err": ""},
                            required=False) == "/p"


def test_mountpoints_must_be_absolute_paths() -> None:
    assert parse_mountpoint("VolumeDriver.Path", {}, required=False) == ""
    for bad in ({}, {"Mountpoint": ""}, {"Mountpoint": "rel/path"}, {"Mountpoint": 3}):
        with pytest.raises(PluginBadAnswer, match="not an absolute path"):
            parse_mountpoint("VolumeDriver.Mount", bad, required=True)


def test_get_and_list() -> None:
    assert parse_get({"Volume": {"Name": "v", "Mountpoint": "/m", "Status": {"a": 1}}}) == \
        Listed("v", "/m", {"a": 1})
    assert parse_get({"Volume": {"Name": "v"}}) == Listed("v", "", None)
    assert parse_get({"Volume": None, "Err": ""}) is None  # moby: no such volume
    assert parse_get({}) is None
    assert parse_list({"Volumes": [{"Name": "a", "Mountpoint": "/a"}, {"Name": "b"}]}) == [
        Listed("a", "/a"), Listed("b", "")]
    assert parse_list({"Volumes": None}) == [] and parse_list({}) == []
    for bad in ({"Volumes": {"a": 1}}, {"Volumes": [{"Mountpoint": "/a"}]},
                {"Volumes": ["a"]}, {"Volumes": [{"Name": ""}]}):
        with pytest.raises(PluginBadAnswer):
            parse_list(bad)


def test_scope_as_later_engines_read_it() -> None:
    assert parse_scope({"Capabilities": {"Scope": "global"}}) == "global"
    assert parse_scope({"Capabilities": {"Scope": "GLOBAL"}}) == "global"
    assert parse_scope({"Capabilities": {"Scope": "cluster"}}) == "local"
    assert parse_scope({"Capabilities": {}}) == "local" and parse_scope({}) == "local"


def test_names_by_driver() -> None:
    check_name("ab")
    with pytest.raises(InvalidParameter, match="invalid characters for a local volume"):
        check_name("x")  # the local driver's rule: two characters at least
    check_name("x", "someplugin")  # a plugin's names are the plugin's business...
    check_name("a@b+c", "someplugin")
    for bad in ("a/b", "a:b", ".hidden", "-x", ""):  # ...within what a record can be named
        with pytest.raises(InvalidParameter, match="not a volume name svc can record"):
            check_name(bad, "someplugin")
    with pytest.raises(InvalidParameter, match="too long"):
        check_name("a" * 256, "someplugin")


def test_a_plugin_volumes_record_keeps_its_mounts_and_owes_them_after_a_restart() -> None:
    v = Volume("v", "plug", "/m", {"o": "1"}, {"l": "x"}, 5, False, users={"c1"},
               owed={"c0"})
    rec = v.record()
    assert rec == {"Name": "v", "Driver": "plug", "Options": {"o": "1"}, "Labels": {"l": "x"},
                   "CreatedAt": 5, "Anonymous": False, "Mounts": ["c0", "c1"]}
    back = Volume.from_record("v", rec)
    assert back.driver == "plug" and back.users == set() and back.owed == {"c0", "c1"}
    local = Volume("l", users={"c1"})
    assert "Mounts" not in local.record()
    assert Volume.from_record("l", local.record()).owed == set()


async def test_keyed_locks_order_one_key_and_not_the_others() -> None:
    locks = KeyedLock()
    order: list[str] = []

    async def hold(key: str, name: str, seconds: float) -> None:
        async with locks.hold(key):
            order.append(f"{name}+")
            await trio.sleep(seconds)
            order.append(f"{name}-")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "a", "a1", 0.2)
        await trio.sleep(0.01)
        nursery.start_soon(hold, "a", "a2", 0)
        nursery.start_soon(hold, "b", "b1", 0)
    assert order.index("b1-") < order.index("a1-")  # b never waited for a
    assert order.index("a1-") < order.index("a2+")
    assert locks._locks == {}  # nothing kept once unused
