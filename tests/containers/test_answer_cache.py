"""Inspect and list answers are kept encoded between requests (svc.api.routes.container_reads)
and answered by the protocol itself (svc.api.fastpath): they must never be stale. Each test
races changes against a crowd of readers that keep the cached answers warm, and checks that
the first read after each change shows it, at two API versions."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from tests.conftest import http_client
from tests.containers.conftest import create
from tests.support.daemon import Daemon

VERSIONS = ("/v1.23", "/v1.21")


@asynccontextmanager
async def readers(d: Daemon, cid: str, n: int = 6) -> AsyncIterator[list[int]]:
    """``n`` clients inspecting ``cid`` and listing, as fast as they can, until the block
    ends; yields the count of answers they got (all must be 200)."""
    done = [0]

    async def read(i: int) -> None:
        async with http_client(d.sock) as c:
            prefix = VERSIONS[i % 2]
            while True:
                r = await c.get(f"{prefix}/containers/{cid}/json")
                assert r.status_code == 200, r.text
                r = await c.get(f"{prefix}/containers/json", params={"all": "1"})
                assert r.status_code == 200, r.text
                done[0] += 2

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(read, i)
        await trio.sleep(0.2)
        yield done
        nursery.cancel_scope.cancel()


async def inspect(api: httpx.AsyncClient, cid: str) -> dict[str, Any]:
    out = {}
    for prefix in VERSIONS:
        r = await api.get(f"{prefix}/containers/{cid}/json")
        assert r.status_code == 200, r.text
        out[prefix] = r.json()
    assert out[VERSIONS[0]]["State"]["Running"] == out[VERSIONS[1]]["State"]["Running"]
    return out[VERSIONS[0]]


async def listed(api: httpx.AsyncClient, cid: str) -> dict[str, Any]:
    r = await api.get("/containers/json", params={"all": "1"})
    assert r.status_code == 200
    return next(item for item in r.json() if item["Id"] == cid)


async def test_lifecycle_changes_are_seen_at_once_under_readers(
        api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    cid = (await create(api, ["sleep", "300"], name="cache-life"))["Id"]
    steps: list[tuple[Callable[[], Awaitable[httpx.Response]], Callable[[dict[str, Any]], bool]]]
    steps = [
        (lambda: api.post(f"/containers/{cid}/start"),
         lambda s: s["State"]["Running"] and s["State"]["Pid"] > 0),
        (lambda: api.post(f"/containers/{cid}/pause"), lambda s: s["State"]["Paused"]),
        (lambda: api.post(f"/containers/{cid}/unpause"), lambda s: not s["State"]["Paused"]),
        (lambda: api.post(f"/containers/{cid}/rename", params={"name": "cache-renamed"}),
         lambda s: s["Name"] == "/cache-renamed"),
        (lambda: api.post(f"/containers/{cid}/update", json={"CpuShares": 512}),
         lambda s: s["HostConfig"]["CpuShares"] == 512),
        (lambda: api.post(f"/containers/{cid}/kill"),
         lambda s: not s["State"]["Running"] and s["State"]["ExitCode"] == 137),
        (lambda: api.post(f"/containers/{cid}/start"), lambda s: s["State"]["Running"]),
        (lambda: api.post(f"/containers/{cid}/stop", params={"t": "0"}),
         lambda s: not s["State"]["Running"] and s["State"]["Pid"] == 0),
    ]
    async with readers(cdaemon, cid) as done:
        for i, (act, seen) in enumerate(steps):
            r = await act()
            assert r.status_code < 300, (i, r.text)
            state = await inspect(api, cid)
            assert seen(state), (i, json.dumps(state["State"]))
        assert done[0] > 20  # the readers really raced the changes
    entry = await listed(api, cid)
    assert entry["Names"] == ["/cache-renamed"] and entry["State"] == "exited"


async def test_exec_and_network_changes_are_seen_at_once_under_readers(
        api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    cid = (await create(api, ["sleep", "300"], name="cache-net"))["Id"]
    assert (await api.post(f"/containers/{cid}/start")).status_code == 204
    r = await api.post("/networks/create", json={"Name": "cache-net-n"})
    assert r.status_code == 201, r.text
    net = r.json()["Id"]
    try:
        async with readers(cdaemon, cid):
            r = await api.post(f"/containers/{cid}/exec", json={"Cmd": ["true"]})
            assert r.status_code == 201, r.text
            assert r.json()["Id"] in (await inspect(api, cid))["ExecIDs"]
            r = await api.post(f"/networks/{net}/connect", json={"Container": cid})
            assert r.status_code == 200, r.text
            nets = (await inspect(api, cid))["NetworkSettings"]["Networks"]
            assert nets["cache-net-n"]["IPAddress"]
            assert "cache-net-n" in (await listed(api, cid))["NetworkSettings"]["Networks"]
            r = await api.post(f"/networks/{net}/disconnect", json={"Container": cid})
            assert r.status_code == 200, r.text
            assert "cache-net-n" not in \
                (await inspect(api, cid))["NetworkSettings"]["Networks"]
    finally:
        await api.delete(f"/containers/{cid}", params={"force": "1"})
        await api.delete(f"/networks/{net}")


async def test_an_exit_is_seen_at_once_by_a_reader_that_waits_for_it(
        api: httpx.AsyncClient, cdaemon: Daemon) -> None:
    """The exit is recorded by the supervisor, not by a request: ``wait`` returns, and the
    next inspect (and the list) shows the exit code, with readers racing throughout."""
    for round_ in range(5):
        cid = (await create(api, ["sh", "-c", f"exit {round_ + 3}"]))["Id"]
        async with readers(cdaemon, cid, n=3):
            assert (await api.post(f"/containers/{cid}/start")).status_code == 204
            r = await api.post(f"/containers/{cid}/wait")
            assert r.json()["StatusCode"] == round_ + 3
            state = (await inspect(api, cid))["State"]
            assert state["Status"] == "exited" and state["ExitCode"] == round_ + 3, state
            assert (await listed(api, cid))["State"] == "exited"


async def test_plain_answers_match_the_full_way(api: httpx.AsyncClient,
                                                cdaemon: Daemon) -> None:
    """The same GET answered by the protocol (no body) and by the app (an empty body sent
    chunked goes the full way)."""
    cid = (await create(api, ["true"], name="cache-same"))["Id"]
    for path in (f"/v1.23/containers/{cid}/json", "/v1.22/containers/json?all=1",
                 "/v1.23/version", "/_ping", "/v1.20/containers/cache-same/json"):
        fast = await api.get(path)
        # a chunked empty body: not a plain request, so the app answers
        full = await api.request("GET", path, content=_empty())
        assert fast.status_code == full.status_code == 200
        assert fast.content == full.content, path
        for name in ("content-type", "api-version", "server", "docker-experimental", "ostype"):
            assert fast.headers.get(name) == full.headers.get(name), (path, name)


async def _empty() -> AsyncIterator[bytes]:
    yield b""
