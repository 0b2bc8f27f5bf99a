"""The plugin protocol against real plugin processes: discovery, activation, calls, and what
a plugin that hangs, crashes, answers garbage or starts late does to its caller."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trustme

from svc.plugins.client import (
    MIMETYPE,
    PluginBadAnswer,
    PluginCallError,
    PluginCallNotFound,
    PluginTimeout,
)
from svc.plugins.discovery import BadSpec, Discovery, PluginNotFound
from svc.plugins.manager import NotImplementing, PluginManager
from tests.support.etcdd import free_port
from tests.support.plugins.process import PluginProcess


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "run", tmp_path / "etc"


@pytest.fixture
def started() -> Iterator[list[PluginProcess]]:
    out: list[PluginProcess] = []
    yield out
    for p in out:
        p.stop()


def manager(dirs: tuple[Path, Path], timeout: float = 5.0) -> PluginManager:
    return PluginManager(Discovery(socket_dirs=[dirs[0]], spec_dirs=[dirs[1]]),
                         timeout=timeout)


def probe(started: list[PluginProcess], name: str, **kw: object) -> PluginProcess:
    p = PluginProcess(name, "probe", **kw)  # type: ignore[arg-type]
    started.append(p)
    return p


async def test_a_socket_plugin_is_activated_as_the_engines_did(dirs, started) -> None:
    p = probe(started, "sockp", socket_dir=dirs[0]).start()
    plugins = manager(dirs)
    got = await plugins.get("sockp", "Probe")
    assert got.implements == ["Probe"]
    assert await got.call("Probe.Echo", {"Name": "x", "Opts": None}) == {"Name": "x",
                                                                          "Opts": None}
    activate = p.calls("Plugin.Activate")
    assert len(activate) == 1 and activate[0]["body"] is None  # an empty body
    headers = {k.lower(): v for k, v in activate[0]["headers"].items()}
    assert headers["accept"] == MIMETYPE
    echo = p.calls("Probe.Echo")[0]
    assert {k.lower(): v for k, v in echo["headers"].items()}["accept"] == MIMETYPE
    assert plugins.activated("Probe") == ["sockp"] and plugins.activated("VolumeDriver") == []
    await plugins.get("sockp", "Probe")
    assert len(p.calls("Plugin.Activate")) == 1  # activated once
    await plugins.aclose()


async def test_a_socket_in_its_own_directory_and_a_spec_file(dirs, started) -> None:
    probe(started, "inner", socket_dir=dirs[0] / "inner").start()
    port = free_port()
    probe(started, "bytcp", tcp=f"127.0.0.1:{port}", spec_dir=dirs[1]).start()
    plugins = manager(dirs)
    assert (await plugins.get("inner", "Probe")).spec.addr.endswith("/inner/inner.sock")
    tcp = await plugins.get("bytcp", "Probe")
    assert tcp.spec.addr == f"tcp://127.0.0.1:{port}"
    assert await tcp.call("Probe.Echo", {"A": 1}) == {"A": 1}
    names = await trio.to_thread.run_sync(plugins.discovery.scan)
    assert sorted(names) == ["bytcp", "inner"]
    await plugins.aclose()


async def test_a_json_spec_with_tls(dirs, started, tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    port = free_port()
    probe(started, "tlsp", tcp=f"127.0.0.1:{port}", spec_dir=dirs[1],
          tls=(str(tmp_path / "server.pem"), str(tmp_path / "server.pem")),
          json_spec={"Name": "ignored", "Addr": f"https://127.0.0.1:{port}",
                     "TLSConfig": {"CAFile": str(tmp_path / "ca.pem")}}).start()
    plugins = manager(dirs)
    got = await plugins.get("tlsp", "Probe")
    assert got.spec.name == "tlsp"  # the file's name, not its Name field
    assert await got.call("Probe.Echo", {"B": 2}) == {"B": 2}
    await plugins.aclose()


async def test_unknown_names_bad_specs_and_other_kinds_say_so(dirs, started) -> None:
    plugins = manager(dirs, timeout=10)
    start = time.monotonic()
    with pytest.raises(PluginNotFound, match="plugin not found"):
        await plugins.get("nothing-here", "VolumeDriver")
    assert time.monotonic() - start < 1  # not the engines' 30 s of retries
    dirs[1].mkdir(parents=True)
    (dirs[1] / "noscheme.spec").write_text("/run/a.sock\n")
    with pytest.raises(BadSpec, match="Unknown protocol in '/run/a.sock'"):
        await plugins.get("noscheme", "Probe")
    (dirs[1] / "hostport.spec").write_text("localhost:8080\n")
    with pytest.raises(BadSpec, match="unsupported protocol 'localhost'"):
        await plugins.get("hostport", "Probe")
    (dirs[1] / "broken.json").write_text("{not json")
    with pytest.raises(BadSpec, match="not valid JSON"):
        await plugins.get("broken", "Probe")
    probe(started, "other", socket_dir=dirs[0]).start()
    with pytest.raises(NotImplementing, match="does not implement the requested driver: "
                       "other implements Probe, not VolumeDriver"):
        await plugins.get("other", "VolumeDriver")
    await plugins.aclose()


async def test_a_plugins_errors_reach_the_caller_with_its_words(dirs, started) -> None:
    probe(started, "errs", socket_dir=dirs[0]).start()
    plugins = manager(dirs)
    p = await plugins.get("errs", "Probe")
    with pytest.raises(PluginCallNotFound) as info:
        await p.call("Probe.Refuse", {"Err": "no such volume: v1"})
    assert str(info.value) == "Probe.Refuse: no such volume: v1"
    with pytest.raises(PluginCallError, match="^Probe.Refuse: disk on fire$") as info2:
        await p.call("Probe.Refuse", {"Err": "disk on fire", "Status": 418})
    assert info2.value.status == 418
    with pytest.raises(PluginCallError) as info3:
        await p.call("Probe.Missing", {})
    assert info3.value.status == 404 and "404 page not found" in str(info3.value)
    await plugins.aclose()


async def test_a_plugin_that_starts_late_is_waited_for(dirs, started) -> None:
    port = free_port()
    late = probe(started, "late", tcp=f"127.0.0.1:{port}", spec_dir=dirs[1])
    late.write_spec()  # the spec is there; nothing listens yet
    plugins = manager(dirs, timeout=10)

    async def start_later() -> None:
        await trio.sleep(0.8)
        late.start(wait=False)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(start_later)
        start = time.monotonic()
        got = await plugins.get("late", "Probe")
    assert 0.8 <= time.monotonic() - start < 5
    assert got.implements == ["Probe"]
    await plugins.aclose()


async def test_a_hanging_plugin_costs_only_its_caller_the_deadline(dirs, started) -> None:
    p = probe(started, "hangs", socket_dir=dirs[0]).start()
    plugins = manager(dirs, timeout=1.0)
    got = await plugins.get("hangs", "Probe")
    p.faults(Probe_Refuse="hang")
    answers: list[float] = []

    async def other_calls() -> None:
        for _ in range(5):
            t = time.monotonic()
            assert await got.call("Probe.Echo", {}) == {}
            answers.append(time.monotonic() - t)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other_calls)
        start = time.monotonic()
        with pytest.raises(PluginTimeout, match="Probe.Refuse: plugin hangs did not answer "
                           "within 1s"):
            await got.call("Probe.Refuse", {"Err": "x"})
        assert 1.0 <= time.monotonic() - start < 2.0
    assert len(answers) == 5 and max(answers) < 0.5
    await plugins.aclose()


async def test_a_cancelled_caller_does_not_wait_for_the_plugin(dirs, started) -> None:
    p = probe(started, "slowp", socket_dir=dirs[0]).start()
    plugins = manager(dirs, timeout=30)
    got = await plugins.get("slowp", "Probe")
    p.faults(Probe_Echo="hang")
    start = time.monotonic()
    with trio.move_on_after(0.3):
        await got.call("Probe.Echo", {})
    assert time.monotonic() - start < 1
    await plugins.aclose()


async def test_a_plugin_that_crashes_mid_call_and_comes_back(dirs, started) -> None:
    p = probe(started, "crashy", socket_dir=dirs[0]).start()
    plugins = manager(dirs, timeout=5)
    got = await plugins.get("crashy", "Probe")
    p.faults(Probe_Echo="crash")
    with pytest.raises(PluginCallError, match="plugin crashy went away during the call"):
        await got.call("Probe.Echo", {"n": 1})
    p.faults()
    p.restart()
    # the next use finds the connection refused... then the new process, activated again
    assert await got.call("Probe.Echo", {"n": 2}) == {"n": 2}
    assert len(p.calls("Plugin.Activate")) == 2
    # a plugin that stays dead: refused, retried within the deadline, then a clear error
    p.kill()
    with pytest.raises(Exception, match="plugin crashy is unreachable"):
        await (await plugins.get("crashy", "Probe")).call("Probe.Echo", {})
    await plugins.aclose()


async def test_garbage_is_a_clear_error(dirs, started) -> None:
    p = probe(started, "junk", socket_dir=dirs[0]).start()
    plugins = manager(dirs)
    got = await plugins.get("junk", "Probe")
    p.faults(Probe_Echo="garbage")
    with pytest.raises(PluginBadAnswer, match="Probe.Echo: plugin junk answered with "
                       "something that is not JSON: '<html>this is not json'"):
        await got.call("Probe.Echo", {})
    p.faults(Plugin_Activate="garbage")
    probe(started, "junk2", socket_dir=dirs[0], args={}).start()
    p2 = started[-1]
    p2.faults(Plugin_Activate="garbage")
    with pytest.raises(PluginBadAnswer, match="Plugin.Activate: plugin junk2"):
        await plugins.get("junk2", "Probe")
    await plugins.aclose()


async def test_get_all_asks_every_plugin_that_implements_the_kind(dirs, started) -> None:
    probe(started, "va", socket_dir=dirs[0], args={"implements": "VolumeDriver"}).start()
    probe(started, "vb", socket_dir=dirs[0],
          args={"implements": "NetworkDriver,VolumeDriver"}).start()
    probe(started, "nv", socket_dir=dirs[0], args={"implements": "NetworkDriver"}).start()
    dead = probe(started, "dead", socket_dir=dirs[0]).start()
    dead.kill()  # its socket stays: left out, without waiting for it
    plugins = manager(dirs, timeout=10)
    start = time.monotonic()
    got = await plugins.get_all("VolumeDriver")
    assert [p.name for p in got] == ["va", "vb"]
    assert time.monotonic() - start < 2
    assert plugins.activated("NetworkDriver") == ["nv", "vb"]
    await plugins.aclose()
