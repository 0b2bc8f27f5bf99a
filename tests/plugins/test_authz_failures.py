"""Authorization plugins that fail, and several in a row: a plugin that is gone, hangs past
``--plugin-timeout``, answers garbage or an ``Err`` denies each request (fails closed) with a
message naming it, within the bound, while the daemon keeps serving; once it is back,
requests pass again. Two plugins are asked in order, and the second not after the first
denies. ``AuthZRes`` denies a held answer; a stream's is only logged."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import docker_cli
from tests.support.daemon import Daemon, import_busybox
from tests.support.plugins.process import PluginProcess

TIMEOUT = 2


class Rig:
    def __init__(self, daemon: Daemon, plugins: list[PluginProcess]) -> None:
        self.daemon, self.plugins = daemon, plugins

    def get(self, path: str, timeout: float = 30) -> httpx.Response:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(self.daemon.sock)),
                          base_url="http://svc", timeout=timeout) as c:
            return c.get(path)

    def rules(self, plugin: PluginProcess, rules: list[dict[str, Any]]) -> None:
        tmp = plugin.state / "rules.json.tmp"
        tmp.write_text(json.dumps(rules))
        tmp.replace(plugin.state / "rules.json")


@pytest.fixture
def rig() -> Iterator[Rig]:
    """A daemon with --plugin-timeout 2 behind plugins "first" and "second"."""
    d = Daemon(["--plugin-timeout", str(TIMEOUT), "--authorization-plugin", "first",
                "--authorization-plugin", "second"])
    plugins = [PluginProcess(n, "authz", socket_dir=d.plugin_dir) for n in ("first", "second")]
    try:
        for p in plugins:
            p.start()
        d.start()
        yield Rig(d, plugins)
    finally:
        d.cleanup()
        for p in plugins:
            p.stop()


def asked(plugin: PluginProcess, uri: str, phase: str = "AuthZPlugin.AuthZReq") -> list[float]:
    return [c["time"] for c in plugin.calls(phase) if c["body"]["RequestUri"] == uri]


def test_two_plugins_in_order_and_the_second_not_after_a_denial(rig: Rig) -> None:
    first, second = rig.plugins
    assert rig.get("/v1.23/info").status_code == 200
    (t1,), (t2,) = asked(first, "/v1.23/info"), asked(second, "/v1.23/info")
    assert t1 <= t2  # first asked first
    assert asked(second, "/v1.23/info", "AuthZPlugin.AuthZRes")
    rig.rules(first, [{"uri": "^/v1.23/version", "msg": "first says no"}])
    r = rig.get("/v1.23/version")
    assert r.status_code == 403 and r.text == "authorization denied by plugin first: " \
                                              "first says no\n"
    assert asked(first, "/v1.23/version") and not asked(second, "/v1.23/version")
    rig.rules(second, [{"uri": "^/v1.23/images/json", "msg": "second says no"}])
    r = rig.get("/v1.23/images/json")
    assert r.status_code == 403 and "by plugin second: second says no" in r.text


def test_a_plugin_that_answers_garbage_or_an_err_denies(rig: Rig) -> None:
    first, _ = rig.plugins
    first.faults(AuthZPlugin_AuthZReq="garbage")
    r = rig.get("/v1.23/containers/json")
    assert r.status_code == 500
    assert r.text.startswith("plugin first failed with error: AuthZPlugin.AuthZReq: plugin "
                             "first answered with something that is not JSON: '<html>"), r.text
    out = docker_cli(rig.daemon.url, "ps")
    assert out.returncode == 1
    assert "Error response from daemon: plugin first failed with error: " in out.stderr
    first.faults()
    rig.rules(first, [{"err": "the policy store is down"}])
    r = rig.get("/v1.23/containers/json")
    assert (r.status_code, r.text) == (500, "plugin first failed with error: "
                                            "AuthZPlugin.AuthZReq: the policy store is down\n")
    rig.rules(first, [{"err": "said with a 200", "code": 200}])  # Err beside a 200: failed too
    assert "AuthZPlugin.AuthZReq: said with a 200" in rig.get("/v1.23/containers/json").text
    rig.rules(first, [])
    assert rig.get("/v1.23/containers/json").status_code == 200


def test_a_hanging_plugin_denies_within_the_bound_and_holds_nobody_else(rig: Rig) -> None:
    first, _ = rig.plugins
    first.faults(AuthZPlugin_AuthZReq="hang")
    results: list[tuple[int, str, float]] = []

    def one() -> None:
        t0 = time.monotonic()
        r = rig.get("/v1.23/containers/json")
        results.append((r.status_code, r.text, time.monotonic() - t0))

    t0 = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    wall = time.monotonic() - t0
    assert len(results) == 6
    for status, text, took in results:
        assert status == 500
        assert text == ("plugin first failed with error: AuthZPlugin.AuthZReq: plugin first "
                        f"did not answer within {TIMEOUT}s\n")
        assert TIMEOUT - 0.2 <= took <= TIMEOUT + 2.5, took
    assert wall <= TIMEOUT + 3, wall  # side by side, not one after another
    first.faults()
    assert rig.get("/v1.23/containers/json").status_code == 200  # serving all along


def test_a_dead_plugin_denies_at_once_and_a_restarted_one_is_taken_back(rig: Rig) -> None:
    first, _ = rig.plugins
    assert rig.get("/v1.23/containers/json").status_code == 200  # activated
    first.kill()  # its socket file stays, as a crashed plugin's does
    t0 = time.monotonic()
    r = rig.get("/v1.23/containers/json")
    assert time.monotonic() - t0 < 1.5  # no waiting for a plugin that might be starting
    assert r.status_code == 500
    assert r.text.startswith("plugin first failed with error: plugin first is unreachable"), \
        r.text
    out = docker_cli(rig.daemon.url, "version")
    assert "plugin first failed with error: plugin first is unreachable" in out.stderr
    first.start()
    assert rig.get("/v1.23/containers/json").status_code == 200
    first.stop()  # gone altogether: no socket
    r = rig.get("/v1.23/containers/json")
    assert (r.status_code, r.text) == (500, "plugin first failed with error: plugin not found\n")


def test_authz_res_denies_a_held_answer_and_only_logs_a_streams(rig: Rig) -> None:
    first, _ = rig.plugins
    import_busybox(rig.daemon)
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(rig.daemon.sock)),
                      base_url="http://svc", timeout=30) as c:
        cid = c.post("/v1.23/containers/create", json={"Image": "busybox",
                                                       "Cmd": ["echo", "logged"]}).json()["Id"]
        c.post(f"/v1.23/containers/{cid}/start").raise_for_status()
        c.post(f"/v1.23/containers/{cid}/wait").raise_for_status()
        rig.rules(first, [{"phase": "res", "uri": "^/v1.23/containers/", "msg": "hidden"}])
        r = c.get(f"/v1.23/containers/{cid}/json")
        assert (r.status_code, r.text) == (403, "authorization denied by plugin first: "
                                                "hidden\n")
        r = c.get(f"/v1.23/containers/{cid}/logs", params={"stdout": 1})
        assert r.status_code == 200 and b"logged" in r.content  # the stream went out
        # (its AuthZRes is asked once the stream has ended: the rule must still hold then)
        deadline = time.monotonic() + 5
        while "the stream had been sent already" not in rig.daemon.log():
            assert time.monotonic() < deadline, rig.daemon.log()[-2000:]
            time.sleep(0.05)
        rig.rules(first, [])
        c.delete(f"/v1.23/containers/{cid}")
