"""Removals that answer at once (issue 27): ``rmi`` and ``rm`` take the object out of reach,
answer, and the files go in the background through ``<root>/trash``; a daemon SIGKILLed
while the trash still holds files finishes deleting after its restart, and what was removed
stays removed; an image loaded again right after its removal is whole.

svc reports no disk-usage figure for API 1.22/1.23 (``/system/df`` came with 1.25; ``/info``
has none; image ``Size``/``VirtualSize`` and container ``SizeRw`` describe live objects
only), so there is no figure to count pending deletes in; these tests check the trash on disk.
"""

from __future__ import annotations

import os

import httpx
import pytest
import trio

from tests.conftest import http_client
from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon
from tests.support.descriptors import files_open

NAME = "trash/many:latest"
FILES = 9000


def _many_files_layer() -> bytes:
    dirs = [timg.directory("data")] + [timg.directory(f"data/d{j:02d}") for j in range(90)]
    files = [timg.file(f"data/d{i % 90:02d}/f{i:05d}", f"{i}\n".encode()) for i in range(FILES)]
    return timg.layer_tar(dirs + files)


@pytest.fixture(scope="module")
def image_tar() -> bytes:
    img = timg.SaveImage([timg.busybox_rootfs_tar(), _many_files_layer()], repo_tags=[NAME])
    return timg.docker_save_tar([img])


def _trash(d: Daemon) -> list[str]:
    try:
        return os.listdir(d.root / "trash")
    except FileNotFoundError:
        return []


def _layer_dirs(d: Daemon) -> set[str]:
    return {p.name for p in (d.root / "overlay2").iterdir() if p.name != "l"}


async def _wait_trash_empty(d: Daemon, timeout: float = 60) -> None:
    with trio.fail_after(timeout):
        while _trash(d):
            await trio.sleep(0.05)


async def _load(c: httpx.AsyncClient, data: bytes) -> str:
    r = await c.post("/images/load", content=data,
                     headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 200 and "error" not in r.text, r.text
    r = await c.get(f"/images/{NAME}/json")
    assert r.status_code == 200, r.text
    image_id: str = r.json()["Id"]
    return image_id


async def _ran_container(c: httpx.AsyncClient, cmd: list[str]) -> str:
    r = await c.post("/containers/create", json={
        "Image": NAME, "Cmd": cmd, "HostConfig": {"NetworkMode": "none"}})
    assert r.status_code == 201, r.text
    cid: str = r.json()["Id"]
    assert (await c.post(f"/containers/{cid}/start")).status_code == 204
    r = await c.post(f"/containers/{cid}/wait")
    assert r.json()["StatusCode"] == 0
    return cid


async def _logs(c: httpx.AsyncClient, cid: str) -> bytes:
    r = await c.get(f"/containers/{cid}/logs", params={"stdout": "1"})
    return _payload(r.content)


def _payload(framed: bytes) -> bytes:
    out, i = b"", 0
    while i + 8 <= len(framed):
        n = int.from_bytes(framed[i + 4:i + 8], "big")
        out += framed[i + 8:i + 8 + n]
        i += 8 + n
    return out


async def test_rmi_and_rm_answer_then_delete_in_the_background(spawn, image_tar) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        pytest.skip(reason)
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(120)
        image_id = await _load(c, image_tar)
        layers_before = _layer_dirs(d)
        assert len(layers_before) == 2
        cid = await _ran_container(c, ["sh", "-c", "mkdir /w; for i in 1 2 3; do "
                                             "echo $i > /w/$i; done; cat /data/d01/f00001"])
        assert await _logs(c, cid) == b"1\n"
        r = await c.delete(f"/containers/{cid}")
        assert r.status_code == 204
        assert (await c.get(f"/containers/{cid}/json")).status_code == 404
        assert not (d.root / "containers" / cid).exists()  # gone from its place at once
        # and nothing of it is held open: its log leaves the disk with its name
        assert files_open(d, cid) == []

        r = await c.delete(f"/images/{NAME}")
        assert r.status_code == 200, r.text
        assert {"Deleted": image_id} in r.json()
        assert (await c.get(f"/images/{image_id}/json")).status_code == 404
        assert (await c.get(f"/images/{NAME}/json")).status_code == 404
        assert _layer_dirs(d) == set()  # the layers are out of the store at once
        assert _trash(d), "the files are deleted after the answer"
        await _wait_trash_empty(d)
        assert (await c.get("/_ping")).status_code == 200
    assert "Traceback" not in d.log()


async def test_reload_right_after_rmi_while_the_old_copy_is_in_the_trash(spawn, image_tar) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        pytest.skip(reason)
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(120)
        first = await _load(c, image_tar)
        assert (await c.delete(f"/images/{NAME}")).status_code == 200
        assert _trash(d)
        assert await _load(c, image_tar) == first  # the same layer ids, while in the trash
        cid = await _ran_container(c, ["sh", "-c", "ls /data/d07 | wc -l; cat /data/d89/f08999"])
        assert (await _logs(c, cid)).split() == [b"100", b"8999"]
        await _wait_trash_empty(d)
        cid = await _ran_container(c, ["cat", "/data/d00/f00000"])
        assert await _logs(c, cid) == b"0\n"  # whole after the old copy went
        assert (await c.delete(f"/containers/{cid}")).status_code == 204


async def test_a_sigkill_mid_delete_finishes_after_the_restart(spawn, image_tar) -> None:  # type: ignore[no-untyped-def]
    if reason := skip_reason():
        pytest.skip(reason)
    d: Daemon = spawn()
    async with http_client(d.sock) as c:
        c.timeout = httpx.Timeout(120)
        image_id = await _load(c, image_tar)
        cid = await _ran_container(c, ["sh", "-c", "seq 1000 > /n"])
        assert (await c.delete(f"/containers/{cid}")).status_code == 204
        assert (await c.delete(f"/images/{NAME}")).status_code == 200
    d.kill()
    left = _trash(d)
    if not left:
        pytest.fail("the trash was empty before the SIGKILL: too few files to catch it")
    d.start()
    async with http_client(d.sock) as c:
        assert (await c.get(f"/images/{image_id}/json")).status_code == 404
        assert (await c.get(f"/containers/{cid}/json")).status_code == 404
        assert NAME not in str((await c.get("/images/json", params={"all": "1"})).json())
        assert (await c.get("/containers/json", params={"all": "1"})).json() == []
        assert _layer_dirs(d) == set()
        assert not (d.root / "containers" / cid).exists()
        await _wait_trash_empty(d)
    assert "Traceback" not in d.log()
