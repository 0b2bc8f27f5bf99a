"""Hostile and malformed input on the container and network paths: a clear 4xx naming what is
wrong, never a 500, a traceback or a record that breaks a list for everyone."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from tests.conftest import http_client
from tests.containers.conftest import IMAGE, create
from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon


async def test_exposed_port_ranges_are_refused_at_create(api: httpx.AsyncClient) -> None:
    for bad in ("1-65535/tcp", "0/tcp", "70000/tcp", "80/sctp", "http"):
        r = await api.post("/containers/create", json={"Image": IMAGE, "Cmd": ["true"],
                                                       "ExposedPorts": {bad: {}}})
        assert r.status_code == 400, (bad, r.text)
        assert "invalid port specification" in r.text and bad in r.text
    assert (await api.get("/containers/json", params={"all": "1"})).status_code == 200


async def test_a_record_that_cannot_be_shown_never_fails_the_list(spawn) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        pytest.skip(reason)
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        await c.post("/images/create", params={"fromSrc": "-", "repo": "busybox",
                                               "tag": "latest"},
                     content=timg.busybox_rootfs_tar())
        bad = (await create(c, ["true"], name="bad"))["Id"]
        good = (await create(c, ["true"], name="good"))["Id"]
    d.kill()
    # an older svc accepted what this one refuses: such a record must still be listed
    path = d.root / "store" / "containers" / f"{bad}.json"
    rec = json.loads(path.read_text())
    rec["config"]["ExposedPorts"] = {"1-65535/tcp": {}, "80/tcp": {}}
    rec["host_config"]["PortBindings"] = {"nope": [{"HostPort": "x"}]}
    path.write_text(json.dumps(rec))
    d.start()
    async with http_client(d.sock) as c:
        for _ in range(2):
            r = await c.get("/containers/json", params={"all": "1"})
            assert r.status_code == 200, r.text
            listed = {x["Id"]: x for x in r.json()}
            assert set(listed) == {bad, good}
            assert listed[bad]["Names"] == ["/bad"]
        r = await c.get(f"/containers/{bad}/json")
        assert r.status_code == 200, r.text
        assert "80/tcp" in r.json()["NetworkSettings"]["Ports"]


async def test_run_rm_of_a_missing_command_ends(host: str) -> None:
    """Below API 1.25 the CLI removes an auto-remove container itself on `die` and waits for
    `destroy`: a start that fails must still send `die`, or the CLI waits forever."""
    from tests.conftest import docker_cli

    with trio.fail_after(60):
        r = await trio.to_thread.run_sync(lambda: docker_cli(
            host, "run", "--rm", IMAGE, "no-such-command-here", timeout=45))
    assert r.returncode == 127, (r.returncode, r.stdout, r.stderr)
    assert "no-such-command-here" in r.stderr
    assert "Traceback" not in r.stderr
    assert docker_cli(host, "ps", "-aq").stdout.strip() == ""


async def test_start_failure_sends_die_with_the_exit_code(api: httpx.AsyncClient) -> None:
    cid = (await create(api, ["no-such-command-here"]))["Id"]
    since = str(int(trio.current_time()))  # noqa: F841 - the bus replays from the last second
    async with api.stream("GET", "/events", params={
            "filters": json.dumps({"container": [cid], "event": ["die"]})}) as events:
        r = await api.post(f"/containers/{cid}/start")
        assert r.status_code in (400, 404, 500) and "no-such-command-here" in r.text
        with trio.fail_after(10):
            async for line in events.aiter_lines():
                if line.strip():
                    ev = json.loads(line)
                    assert ev["Action"] == "die"
                    assert ev["Actor"]["Attributes"]["exitCode"] == "127"
                    break
    st = (await api.get(f"/containers/{cid}/json")).json()["State"]
    assert (st["Status"], st["ExitCode"]) in (("created", 127), ("exited", 127))
