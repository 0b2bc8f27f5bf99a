"""What COPY and ADD put in the image's layer: files copied below a VOLUME (into the image, not
into the step container's anonymous volume), and an ADD'd archive held to the context's
absolute size limits."""

from __future__ import annotations

import io
import tarfile

import httpx

from tests.build.conftest import BASE, build, built_id
from tests.build.test_build_context import _run


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
