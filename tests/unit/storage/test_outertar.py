from __future__ import annotations

import io
import tarfile

import pytest

from svc.storage.outertar import OuterTar


def _tar(fmt: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, data in (("a" * 150 + "/layer.tar", b"x" * 70000), ("manifest.json", b"[]"),
                           ("small", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("b/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, "../" + "a" * 150 + "/layer.tar"
        t.addfile(link)
    return out.getvalue()


class Dribble(io.RawIOBase):
    """Hands out the data a few bytes at a time, like a slow socket."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        out = self.data[self.pos : self.pos + min(self.step, n if n >= 0 else self.step)]
        self.pos += len(out)
        return out


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
@pytest.mark.parametrize("step", [7, 4096, 1 << 20])
def test_members_and_data(fmt: int, step: int) -> None:
    got = []
    for info, body in OuterTar(Dribble(_tar(fmt), step)).members():  # type: ignore[arg-type]
        got.append((info.name, info.type, body.readall() if info.isreg() else info.linkname))
    assert got == [("a" * 150 + "/layer.tar", tarfile.REGTYPE, b"x" * 70000),
                   ("manifest.json", tarfile.REGTYPE, b"[]"), ("small", tarfile.REGTYPE, b""),
                   ("b/layer.tar", tarfile.SYMTYPE, "../" + "a" * 150 + "/layer.tar")]


def test_unread_data_is_skipped_and_truncation_detected() -> None:
    data = _tar(tarfile.PAX_FORMAT)
    names = [i.name for i, _ in OuterTar(io.BytesIO(data)).members()]
    assert names[1] == "manifest.json"
    with pytest.raises(tarfile.ReadError):
        for _info, body in OuterTar(io.BytesIO(data[:3000])).members():
            body.readall()
    with pytest.raises(tarfile.TarError):
        list(OuterTar(io.BytesIO(b"\x01" * 1024)).members())
