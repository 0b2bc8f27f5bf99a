"""Container removal: ``destroy`` goes out only once the removal is complete (below API 1.25 the
CLI's ``run --rm`` stops waiting at ``destroy`` and would cancel its own DELETE), and what a
crash leaves of a create or a removal is swept at the next start."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio

from tests.api.test_events import Stream
from tests.conftest import docker_cli, http_client
from tests.containers.conftest import create, inspect
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


async def _until_destroy(stream: Stream, cid: str) -> list[dict[str, Any]]:
    """Events until the container's ``destroy`` (the last one returned)."""
    seen = []
    while True:
        (ev,) = await stream.events(1, timeout=20)
        seen.append(ev)
        if ev.get("Type") == "container" and ev["Action"] == "destroy" and \
                ev["Actor"]["ID"] == cid:
            return seen


@pytest.mark.parametrize("state", ["created", "exited", "running"])
async def test_destroy_comes_when_the_removal_is_done(cdaemon: Daemon, api: httpx.AsyncClient,
                                                      state: str) -> None:
    cid = (await create(api, ["sleep", "300"] if state == "running" else ["true"],
                        Volumes={"/data": {}}))["Id"]
    volume = (await inspect(api, cid))["Mounts"][0]["Name"]
    if state != "created":
        assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    if state == "exited":
        with trio.fail_after(10):
            assert (await api.post(f"/containers/{cid}/wait")).json() == {"StatusCode": 0}
    stream = await Stream.open(cdaemon)
    deleted: list[httpx.Response] = []
    seen_at_destroy: dict[str, Any] = {}

    async def delete() -> None:
        deleted.append(await api.delete(f"/containers/{cid}",
                                        params={"v": "1", "force": "1"}))
        seen_at_destroy["answered_at"] = trio.current_time()

    async def watch() -> None:
        events = await _until_destroy(stream, cid)
        seen_at_destroy["destroy_at"] = trio.current_time()
        async with http_client(cdaemon.sock) as other:
            seen_at_destroy["inspect"] = (await other.get(f"/containers/{cid}/json")).status_code
            seen_at_destroy["volume"] = (await other.get(f"/volumes/{volume}")).status_code
        seen_at_destroy["dir"] = (cdaemon.root / "containers" / cid).exists()
        seen_at_destroy["order"] = [(e["Type"], e["Action"]) for e in events
                                    if e["Actor"]["ID"] in (cid, volume)]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await trio.sleep(0.05)
        nursery.start_soon(delete)
    await stream.aclose()
    assert deleted[0].status_code == 204, deleted[0].text
    # the answer was on its way before destroy was published: it is read at once
    assert seen_at_destroy["answered_at"] - seen_at_destroy["destroy_at"] < 1.0
    assert seen_at_destroy["inspect"] == 404 and seen_at_destroy["volume"] == 404
    assert seen_at_destroy["dir"] is False
    order = seen_at_destroy["order"]
    # the anonymous volume goes before the container is announced gone, as in dockerd
    assert order.index(("volume", "destroy")) < order.index(("container", "destroy"))
    assert order[-1] == ("container", "destroy")


async def test_destroy_waits_until_the_client_has_read_the_answer(cdaemon: Daemon,
                                                                api: httpx.AsyncClient) -> None:
    """On a unix socket, ``destroy`` goes out once the DELETE's client has read its 204 from
    the socket, not merely once it was written: the CLI's events connection could otherwise
    deliver ``destroy`` first (at most ``READ_WAIT`` for a client that never reads)."""
    cid = (await create(api, ["true"]))["Id"]
    stream = await Stream.open(cdaemon, f'?filters={{"container":["{cid}"]}}')
    s = await connect(cdaemon.sock)
    try:
        await s.send_all(f"DELETE /v1.23/containers/{cid} HTTP/1.1\r\nHost: svc\r\n\r\n"
                         .encode())
        with trio.fail_after(10):  # removed (the 204 sits unread in the socket)
            while (await api.get(f"/containers/{cid}/json")).status_code != 404:
                await trio.sleep(0.01)
        with trio.move_on_after(0.3):
            early = await stream.events(1, timeout=1)
            raise AssertionError(f"destroy before the answer was read: {early}")
        answer = await read_head(s, bytearray())
        assert answer.startswith(b"HTTP/1.1 204"), answer
        (ev,) = await stream.events(1, timeout=5)
        assert (ev["Action"], ev["Actor"]["ID"]) == ("destroy", cid)
    finally:
        await s.aclose()
        await stream.aclose()


def test_cli_run_rm_removes_without_errors(cdaemon: Daemon, host: str) -> None:
    """CLI 28 at API 1.23 removes the container itself at ``die`` and stops waiting at
    ``destroy``: a ``destroy`` before the DELETE's answer made it print ``error removing
    container: ... context canceled``."""
    for i in range(20):
        out = docker_cli(host, "run", "--rm", "busybox", "true")
        assert out.returncode == 0, f"run {i}: {out.stderr}"
        assert "error removing container" not in out.stderr, f"run {i}: {out.stderr}"
    assert docker_cli(host, "ps", "-aq").stdout == ""


async def test_leftover_directories_are_swept_at_start() -> None:
    """A crash between a create's directory and its record, or between a removal's record
    and its directory, leaves a directory without a record: swept at the next start, unless
    a damaged record (moved aside) names it."""
    d = Daemon()
    try:
        d.start()
        assert d.stop() == 0
        containers = d.root / "containers"
        leftover, damaged = containers / ("a" * 64), containers / ("b" * 64)
        other = containers / "not-a-container"
        for path in (leftover, damaged, other):
            (path / "rootfs").mkdir(parents=True)
        (d.root / "store" / "containers" / f"{'b' * 64}.json.corrupt").write_text("{")
        d.start()
        async with http_client(d.sock) as c:
            assert (await c.get("/_ping")).status_code == 200
        assert not leftover.exists()
        assert damaged.exists() and other.exists()
        assert "a container directory without a record" in d.log()
    finally:
        d.cleanup()


async def test_removed_container_stays_removed_after_a_restart(spawn) -> None:  # type: ignore[no-untyped-def]
    """The record goes first: a removed container does not come back, created or exited."""
    from tests.containers.conftest import IMAGE
    from tests.support import images as timg

    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(60)
        await timg.import_busybox(c)
        ids = []
        for cmd in (["true"], ["true"]):
            r = await c.post("/containers/create", json={"Image": IMAGE, "Cmd": cmd})
            ids.append(r.json()["Id"])
        assert (await c.post(f"/containers/{ids[1]}/start")).status_code == 204
        with trio.fail_after(10):
            await c.post(f"/containers/{ids[1]}/wait")
        for cid in ids:
            assert (await c.delete(f"/containers/{cid}")).status_code == 204
    d.kill()
    d.start()
    async with http_client(d.sock) as c:
        listed = (await c.get("/containers/json", params={"all": "1"})).json()
    assert listed == []
    assert not any((d.root / "containers" / cid).exists() for cid in ids)
