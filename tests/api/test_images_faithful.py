"""Saving is byte-faithful for every layer svc accepts, and what it cannot keep is refused at
import or load time with a clear message (issue 24, item 3)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import trio

from tests.conftest import http_client
from tests.support import images as timg
from tests.support.daemon import Daemon


@pytest.fixture(scope="module")
def d() -> Daemon:
    daemon = Daemon().start()
    yield daemon  # type: ignore[misc]
    daemon.cleanup()


@pytest.fixture
async def c(d: Daemon) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(d.sock) as client:
        client.timeout = httpx.Timeout(60)
        yield client


def _last(resp: httpx.Response) -> dict[str, Any]:
    return json.loads(resp.text.strip().splitlines()[-1])


async def _import(c: httpx.AsyncClient, data: bytes, repo: str) -> httpx.Response:
    return await c.post("/images/create", params={"fromSrc": "-", "repo": repo},
                        content=data, headers={"Content-Type": "application/x-tar"})


async def _saved_layers(c: httpx.AsyncClient, name: str) -> list[bytes]:
    r = await c.get(f"/images/{name}/get")
    assert r.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(r.content)) as t:
        manifest = json.loads(t.extractfile("manifest.json").read())  # type: ignore[union-attr]
        return [t.extractfile(p).read() for p in manifest[0]["Layers"]]  # type: ignore[union-attr]


DUPLICATES = {
    "file twice": [timg.file("etc/conf", b"first"), timg.file("etc/conf", b"second!")],
    "same size": [timg.file("f", b"aaaa"), timg.file("f", b"bbbb")],
    "tree replaced": [timg.directory("d"), timg.file("d/a", b"a" * 5000),
                      timg.file("d", b"now a file")],
    "hard link kept": [timg.file("h", b"orig"), timg.hardlink("h2", "h"),
                       timg.file("h", b"replaced")],
}


@pytest.mark.parametrize("entries", DUPLICATES.values(), ids=DUPLICATES.keys())
async def test_an_imported_layer_with_duplicate_entries_saves_as_imported(
        c: httpx.AsyncClient, entries: list[timg.Entry]) -> None:
    layer = timg.layer_tar(entries)
    repo = "dup" + str(abs(hash(layer)) % 10**8)
    r = await _import(c, layer, repo)
    assert "error" not in _last(r), r.text
    assert await _saved_layers(c, repo) == [layer]


async def test_a_loaded_image_with_duplicate_entries_saves_as_loaded(
        c: httpx.AsyncClient) -> None:
    base = timg.layer_tar([timg.file("a", b"1"), timg.file("a", b"22")])
    top = timg.layer_tar([timg.file("b", b"x" * 3000), timg.file("b", b"y")])
    img = timg.SaveImage([base, top], repo_tags=["duploaded:1"])
    assert (await c.post("/images/load", content=timg.docker_save_tar([img]))).status_code == 200
    assert await _saved_layers(c, "duploaded:1") == [base, top]
    # and a save of it loads again, elsewhere or here, to the same image
    r = await c.get("/images/duploaded:1/get")
    assert (await c.delete("/images/duploaded:1")).status_code == 200
    assert (await c.post("/images/load", content=r.content)).status_code == 200
    assert (await c.get("/images/duploaded:1/json")).json()["Id"] == img.image_id()


HOSTILE = {
    "capability xattr": ([timg.file("f", b"x", xattrs={"security.capability": b"\x01junk"})],
                         'extended attribute "security.capability" the kernel refuses'),
    "10,000-character name": ([timg.file("a" * 10_000, b"x")],
                              "has a name longer than 255 bytes"),
    "deep path": ([timg.file("/".join(["d" * 200] * 50), b"x")], "has a path longer than"),
    "long link target": ([timg.symlink("l", "t" * 5000)], "has a target longer than 4095"),
}


@pytest.mark.parametrize("entries, says", HOSTILE.values(), ids=HOSTILE.keys())
async def test_hostile_layers_are_refused_clearly(c: httpx.AsyncClient, entries: list[timg.Entry],
                                                 says: str) -> None:
    layer = timg.layer_tar(entries)
    last = _last(await _import(c, layer, "hostile"))
    assert "invalid layer archive" in last.get("error", "") and says in last["error"], last
    assert len(last["error"]) < 600  # a long name is shown cut short
    img = timg.SaveImage([layer], repo_tags=["hostile:1"])
    r = await c.post("/images/load", content=timg.docker_save_tar([img]))
    assert r.status_code == 200 and says in _last(r)["error"], r.text  # as dockerd answers
    assert (await c.get("/images/hostile:1/json")).status_code == 404


async def test_overlay_xattrs_in_a_layer_are_not_applied(d: Daemon, c: httpx.AsyncClient) -> None:
    """``trusted.overlay.*`` belongs to the storage driver: a layer's own are not set (they
    could redirect or hide paths), yet the layer saves as it came."""
    layer = timg.layer_tar([timg.directory("d", xattrs={"trusted.overlay.opaque": b"y",
                                                        "trusted.overlay.redirect": b"/etc"}),
                            timg.file("d/f", b"x")])
    assert "error" not in _last(await _import(c, layer, "ovl"))
    upper = (await c.get("/images/ovl/json")).json()["GraphDriver"]["Data"]["UpperDir"]
    assert not [k for k in os.listxattr(f"{upper}/d") if k.startswith("trusted.overlay.")]
    assert await _saved_layers(c, "ovl") == [layer]


async def test_a_gnu_sparse_layer_is_accepted_and_saves_as_imported(
        c: httpx.AsyncClient, tmp_path: Any) -> None:
    """GNU tar's sparse entries (old GNU and PAX 1.0 here; every format in the unit tests)
    are accepted as the engines accepted them, with the file's holes, and saved unchanged."""
    src = tmp_path / "src"
    src.mkdir()
    with open(src / "db", "wb") as f:
        f.truncate(16 << 20)
        f.seek(8 << 20)
        f.write(b"payload in the middle")
    for fmt in (["--format=gnu"], ["--format=pax", "--sparse-version=1.0"]):
        out = tmp_path / "layer.tar"
        await trio.run_process(["tar", "--sparse", *fmt, "--owner=0", "--group=0",
                                "--numeric-owner", "-cf", str(out), "-C", str(src), "."])
        layer = out.read_bytes()
        repo = "sparse" + fmt[-1].rsplit("=", 1)[-1].replace(".", "")
        assert "error" not in _last(await _import(c, layer, repo))
        assert await _saved_layers(c, repo) == [layer]
        upper = (await c.get(f"/images/{repo}/json")).json()["GraphDriver"]["Data"]["UpperDir"]
        st = os.stat(f"{upper}/db")
        assert st.st_size == 16 << 20 and st.st_blocks * 512 < 1 << 20
