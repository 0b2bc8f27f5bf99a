"""A client that goes away mid-RUN: the step's container is killed and removed, the images
the build made go, and the next build runs at once; a build blocks no other request."""

from __future__ import annotations

import httpx
import trio

from tests.builds.conftest import BASE, build, built_id, context_tar
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


async def _state(api: httpx.AsyncClient) -> tuple[set[str], set[str]]:
    containers = {c["Id"] for c in (await api.get("/containers/json?all=1")).json()}
    images = {i["Id"] for i in (await api.get("/images/json?all=1")).json()}
    return containers, images


async def start_build(sock: object, body: bytes, query: str
                      ) -> tuple[trio.SocketStream, bytearray]:
    """POST /build over a raw connection, up to the answer's head (200); the connection and
    what was read past the head."""
    s = await connect(sock)
    await s.send_all(f"POST /v1.23/build?{query} HTTP/1.1\r\nHost: svc\r\n".encode()
                     + b"Content-Type: application/x-tar\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    buf = bytearray()
    assert (await read_head(s, buf)).startswith(b"HTTP/1.1 200")
    return s, buf


async def test_disconnect_mid_run(api: httpx.AsyncClient, bdaemon: Daemon) -> None:
    before = await _state(api)
    body = context_tar({"Dockerfile": f"FROM {BASE}\nLABEL cut=1\nRUN echo started; sleep 60\n"
                                      "LABEL never=1\n"})
    s, buf = await start_build(bdaemon.sock, body, "t=cut:1")
    with trio.fail_after(30):
        while b"started" not in buf:
            buf += await s.receive_some()
    during, _ = await _state(api)
    assert len(during - before[0]) == 1  # the RUN step's container
    # another request is served while the build runs
    assert (await api.get("/_ping")).status_code == 200
    await s.aclose()
    with trio.fail_after(20):
        while await _state(api) != before:
            await trio.sleep(0.1)
    assert (await api.get("/images/cut:1/json")).status_code == 404
    with trio.fail_after(30):
        again = await build(api, {"Dockerfile": f"FROM {BASE}\nRUN true\n"})
    built_id(again)


async def test_builds_run_side_by_side(api: httpx.AsyncClient) -> None:
    """A slow build holds no lock another build waits for."""
    done: list[str] = []

    async def slow() -> None:
        built_id(await build(api, {"Dockerfile": f"FROM {BASE}\nRUN sleep 3\n"}, nocache="1"))
        done.append("slow")

    async def quick() -> None:
        await trio.sleep(0.5)
        built_id(await build(api, {"Dockerfile": f"FROM {BASE}\nRUN true\nLABEL q=1\n"},
                             nocache="1"))
        done.append("quick")

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            nursery.start_soon(quick)
    assert done == ["quick", "slow"]


async def test_disconnect_mid_upload_leaves_nothing(bdaemon: Daemon) -> None:
    """A client gone while its context is still arriving: the partial context goes."""
    tar = context_tar({"Dockerfile": f"FROM {BASE}\n", "big": b"x" * 2_000_000})
    s = await connect(bdaemon.sock)
    await s.send_all(b"POST /v1.23/build HTTP/1.1\r\nHost: svc\r\n"
                     b"Content-Type: application/x-tar\r\n"
                     + f"Content-Length: {len(tar)}\r\n\r\n".encode() + tar[:1_000_000])
    builds = bdaemon.root / "builds"
    with trio.fail_after(10):
        while not any(builds.iterdir()):
            await trio.sleep(0.01)
    await trio.sleep(0.2)
    assert any(builds.iterdir())  # still waiting for the rest of the context
    await s.aclose()
    with trio.fail_after(10):
        while any(builds.iterdir()):
            await trio.sleep(0.05)
