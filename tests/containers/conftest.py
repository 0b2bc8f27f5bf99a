"""A daemon with a busybox image for the container tests; each test's containers are removed
after it, whatever happened."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import trio

from tests.conftest import http_client
from tests.runtime.conftest import skip_reason
from tests.support.daemon import Daemon, with_busybox

IMAGE = "busybox:latest"


@pytest.fixture(scope="module")
def cdaemon() -> Iterator[Daemon]:
    if reason := skip_reason():
        pytest.skip(reason)
    with with_busybox() as d:
        yield d


@pytest.fixture
async def api(cdaemon: Daemon) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(cdaemon.sock) as c:
        c.timeout = httpx.Timeout(60)
        yield c
        for item in (await c.get("/containers/json", params={"all": "1"})).json():
            await c.delete(f"/containers/{item['Id']}", params={"force": "1"})


@pytest.fixture
def host(cdaemon: Daemon) -> Iterator[str]:
    """The daemon's address for the docker CLI; its containers are removed afterwards."""
    from tests.conftest import docker_cli

    yield cdaemon.url
    ids = docker_cli(cdaemon.url, "ps", "-aq").stdout.split()
    if ids:
        docker_cli(cdaemon.url, "rm", "-f", *ids)


async def create(c: httpx.AsyncClient, cmd: list[str] | None = None, *, name: str | None = None,
                 status: int = 201, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"Image": IMAGE, **fields}
    if cmd is not None:
        body["Cmd"] = cmd
    r = await c.post("/containers/create", json=body,
                     params={"name": name} if name else None)
    assert r.status_code == status, r.text
    return r.json() if r.headers.get("content-type", "").startswith("application/json") \
        else {"text": r.text}


async def run(c: httpx.AsyncClient, cmd: list[str], **fields: Any) -> tuple[str, int]:
    """Create, start and wait; (the container id, its exit code)."""
    cid = (await create(c, cmd, **fields))["Id"]
    r = await c.post(f"/containers/{cid}/start")
    assert r.status_code == 204, r.text
    with trio.fail_after(30):
        r = await c.post(f"/containers/{cid}/wait")
    assert r.status_code == 200, r.text
    return cid, int(r.json()["StatusCode"])


async def output(c: httpx.AsyncClient, cid: str, *, stderr: bool = False) -> str:
    """The container's stdout (or stderr) from its log, stdcopy frames decoded."""
    r = await c.get(f"/containers/{cid}/logs",
                    params={"stdout": str(not stderr).lower(), "stderr": str(stderr).lower()})
    assert r.status_code == 200, r.text
    return demux(r.content)[2 if stderr else 1].decode()


def demux(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {1: b"", 2: b""}
    pos = 0
    while pos < len(data):
        kind, size = data[pos], int.from_bytes(data[pos + 4:pos + 8], "big")
        out[kind] = out.get(kind, b"") + data[pos + 8:pos + 8 + size]
        pos += 8 + size
    return out


async def inspect(c: httpx.AsyncClient, ref: str) -> dict[str, Any]:
    r = await c.get(f"/containers/{ref}/json")
    assert r.status_code == 200, r.text
    return json.loads(r.text)  # type: ignore[no-any-return]


async def iptables_rules(*args: str) -> str:
    """``iptables -S`` output with svc's ownership comments taken out (the rules as dockerd
    would show them)."""
    out = (await trio.run_process(["iptables", "-w", *args], capture_stdout=True)).stdout
    return re.sub(r' -m comment --comment "?svc:[^" ]+"?', "", out.decode())
