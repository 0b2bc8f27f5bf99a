"""What COPY and ADD put in the image's layer: files copied below a VOLUME (into the image, not
into the step container's anonymous volume), an ADD'd archive's files owned by ``--chown``,
and an ADD'd archive held to the context's absolute size limits."""

from __future__ import annotations

import io
import lzma
import tarfile

import httpx

from tests.builds.conftest import BASE, build, built_id, stream_text
from tests.builds.test_build_context import _run, sparse_bomb


def _archive(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def test_copy_below_a_volume_lands_in_the_image(api: httpx.AsyncClient) -> None:
    files: dict[str, bytes | str] = {
        "Dockerfile": f"FROM {BASE}\nVOLUME /data\nCOPY f /data/\nADD a.tar.gz /data/\n"
                      "RUN cat /data/f /data/in-archive\n",
        "f": "copied\n", "a.tar.gz": _archive("in-archive", b"unpacked\n")}
    msgs = await build(api, files)
    image = built_id(msgs)
    assert await _run(api, image, "cat /data/f /data/in-archive") == "copied\nunpacked\n"


async def test_add_chown_owns_the_archive_files(api: httpx.AsyncClient) -> None:
    files: dict[str, bytes | str] = {
        "Dockerfile": f"FROM {BASE}\nADD --chown=1000:2000 a.tar.gz /x/\n",
        "a.tar.gz": _archive("d/in-archive", b"unpacked\n")}
    image = built_id(await build(api, files))
    assert await _run(api, image, "cat /x/d/in-archive; stat -c %u:%g /x/d/in-archive") == \
        "unpacked\n1000:2000\n"


async def test_add_of_an_archive_bomb_is_refused(api: httpx.AsyncClient) -> None:
    """A 10 KiB xz archive of a 1 PiB (sparse) file: refused before it is written."""
    images = len((await api.get("/images/json", params={"all": "1"})).json())
    bomb = lzma.compress(sparse_bomb(1 << 50))
    assert len(bomb) < 10_000
    msgs = await build(api, {"Dockerfile": f"FROM {BASE}\nADD bomb.tar.xz /x/\n",
                             "bomb.tar.xz": bomb})
    assert msgs[-1]["error"] == ("ADD of bomb.tar.xz refused: 'holes' takes it past 16 GiB "
                                 "(a decompression bomb?)"), msgs
    assert "Successfully built" not in stream_text(msgs)
    assert len((await api.get("/images/json", params={"all": "1"})).json()) == images
