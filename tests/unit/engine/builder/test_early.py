"""The look at a context's first bytes: the instructions file is taken only when it is the
first file (directories and ignore files may come before it), whatever the compression."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
from collections.abc import AsyncIterator, Callable

import pytest

from svc.engine.builder.early import peek, replay


def _tar(entries: list[tuple[str, bytes | None]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def _chunks(data: bytes, size: int = 700) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


@pytest.mark.parametrize("compress", [lambda b: b, gzip.compress, bz2.compress,
                                      lzma.compress])
async def test_first_file_found_and_replayed(compress: Callable[[bytes], bytes]) -> None:
    body = compress(_tar([(".", None), (".dockerignore", b"x\n"), ("Svcfile", b"FROM a\n"),
                          ("big", bytes(200_000))]))
    rest = aiter(_chunks(body))
    peeked = await peek(rest, None)
    assert peeked.first == ("Svcfile", b"FROM a\n")
    assert not peeked.ended
    assert b"".join([c async for c in replay(peeked, rest)]) == body


@pytest.mark.parametrize(("entries", "svcfile"), [
    ([("a", b"x"), ("Svcfile", b"FROM a\n")], None),  # another file first
    ([("Dockerfile", b"FROM a\n")], None),  # a Svcfile may still come
    ([("Svcfile", b"FROM a\n")], "other"),  # not the one the request names
])
async def test_not_first(entries: list[tuple[str, bytes | None]], svcfile: str | None) -> None:
    body = _tar(entries)
    rest = aiter(_chunks(body))
    peeked = await peek(rest, svcfile)
    assert peeked.first is None
    assert b"".join([c async for c in replay(peeked, rest)]) == body


async def test_named_file_and_garbage() -> None:
    body = _tar([("sub", None), ("sub/My.file", b"FROM b\n")])
    assert (await peek(aiter(_chunks(body)), "./sub/My.file")).first == \
        ("sub/My.file", b"FROM b\n")
    assert (await peek(aiter(_chunks(b"not a tar" * 500)), None)).first is None
    assert (await peek(aiter(_chunks(b"")), None)).first is None
