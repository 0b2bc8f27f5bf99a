"""POST /images/create?fromSrc=: an image from a rootfs tarball (the request body or a URL).

The tarball becomes one layer (no parent); its config gets ``changes`` applied and a history
entry "Imported from <src>". Progress goes to a channel as dockerd's JSON messages.
"""

from __future__ import annotations

import contextlib
import io
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import trio

from svc.engine.images import config as imageconfig
from svc.engine.images.service import Image, ImageService
from svc.engine.streams import PrefetchReader, prefetching
from svc.errors import InvalidParameter
from svc.models.imageconfig import RunConfig
from svc.storage.layers import StagedLayer
from svc.wire.reference import Reference

PROGRESS_EVERY = 0.1  # seconds between progress messages


@dataclass
class ImportSpec:
    src: str  # "-" (the request body) or an http(s) URL
    ref: Reference | None = None
    changes: list[str] = field(default_factory=list)
    message: str = ""


def check_spec(spec: ImportSpec) -> None:
    """Everything that can be refused before the stream starts."""
    imageconfig.apply_changes(RunConfig(), spec.changes)
    if spec.ref is not None and spec.ref.digest is not None:
        raise InvalidParameter("cannot import to a digest reference: use repo and tag")
    if spec.src != "-" and not spec.src.startswith(("http://", "https://")):
        raise InvalidParameter(f"fromSrc must be - or an http(s) URL, not {spec.src!r}")
    if spec.src != "-":
        try:
            parts = urllib.parse.urlsplit(spec.src)
            parts.port  # noqa: B018 - raises ValueError for a bad port
        except ValueError as exc:
            raise InvalidParameter(f"fromSrc is not a valid URL ({exc}): {spec.src!r}") \
                from None
        if not parts.hostname:
            raise InvalidParameter(f"fromSrc names no host: {spec.src!r}")


class _Progress(io.RawIOBase):
    """Counts bytes read through it and reports "Importing" progress now and then."""

    def __init__(self, inner: BinaryIO, total: int | None,
                 report: Callable[[dict[str, Any]], None]) -> None:
        self._inner = inner
        self._total = total
        self._report = report
        self.current = 0
        self._last = 0.0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = self._inner.readinto(b)  # type: ignore[attr-defined,unused-ignore]
        self.current += n or 0
        now = time.monotonic()
        if n and now - self._last >= PROGRESS_EVERY:
            self._last = now
            detail: dict[str, Any] = {"current": self.current}
            if self._total:
                detail["total"] = self._total
            self._report({"status": "Importing", "progressDetail": detail,
                          "progress": _human(self.current, self._total), "id": ""})
        return n or 0


def _human(current: int, total: int | None) -> str:
    mb = current / 1e6
    return f"{mb:.3f} MB" if not total else f"{mb:.3f} MB/{total / 1e6:.3f} MB"


def _open_url(url: str) -> tuple[BinaryIO, int | None]:
    try:
        resp = urllib.request.urlopen(url, timeout=30)  # noqa: S310 - http(s) checked above
    except urllib.error.HTTPError as exc:
        raise InvalidParameter(f"cannot import {url}: the server answered {exc.code} "
                               f"{exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise InvalidParameter(f"cannot import {url}: {reason}") from None
    length = resp.headers.get("Content-Length")
    return resp, int(length) if length and length.isdigit() else None


async def import_image(svc: ImageService, spec: ImportSpec, body: AsyncIterator[bytes],
                       progress: trio.MemorySendChannel[dict[str, Any]]) -> Image:
    """Register the layer (in a worker thread), then the image and its name.

    Cancellation: if the client goes away mid-upload the worker stops at its next read and
    the half-extracted layer is discarded; nothing is recorded.
    """

    def report(msg: dict[str, Any]) -> None:
        with contextlib.suppress(trio.WouldBlock):  # a slow reader skips progress, not data
            trio.from_thread.run_sync(progress.send_nowait, msg)

    def stage(reader: PrefetchReader | None) -> StagedLayer:
        if reader is not None:
            source: BinaryIO = io.BufferedReader(reader, 1 << 20)  # type: ignore[arg-type,unused-ignore]
            total = None
        else:
            source, total = _open_url(spec.src)
        try:
            return svc.layers.stage(_Progress(source, total, report))  # type: ignore[arg-type,unused-ignore]
        finally:
            source.close()

    if spec.src == "-":
        async with prefetching(body) as reader:
            staged = await trio.to_thread.run_sync(stage, reader)
    else:
        staged = await trio.to_thread.run_sync(stage, None)
    try:
        layer = await svc.commit_layer(staged, None)
    finally:
        await trio.to_thread.run_sync(svc.layers.discard, staged)
    comment = spec.message or f"Imported from {spec.src}"
    config = imageconfig.import_config(layer.diff_id, created_ns=time.time_ns(),
                                       changes=spec.changes, comment=comment)
    try:
        async with svc.lock:
            image = await svc.commit_image(config, [layer.chain_id])
            name = image.id
            if spec.ref is not None:
                await svc.add_ref(image, spec.ref, force=True)
                name = spec.ref.familiar_string()
    finally:
        await svc.release_layers([layer.chain_id])
    svc.events.publish("image", "import", image.id, {"name": name})
    return image


SNIFF_BYTES = 64 * 1024


async def sniff_archive(body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Check that a body starts like a (possibly compressed) tar archive; a 400 if not.

    Returns an iterator over the whole body (the bytes read to check it included).
    """
    head = bytearray()
    it = body.__aiter__()
    while len(head) < SNIFF_BYTES:
        try:
            head += await it.__anext__()
        except StopAsyncIteration:
            break
    problem = tar_problem(bytes(head))
    if problem:
        raise InvalidParameter(f"invalid import archive: {problem}")

    async def chained() -> AsyncIterator[bytes]:
        yield bytes(head)
        async for chunk in it:
            yield chunk

    return chained()


def tar_problem(head: bytes) -> str | None:
    """Why ``head`` cannot be the start of a tar stream (after decompression), or None."""
    import bz2
    import lzma
    import tarfile
    import zlib

    if not head:
        return "the archive is empty"
    data = head
    try:
        if head[:2] == b"\x1f\x8b":
            data = zlib.decompressobj(31).decompress(head, 4096)
        elif head[:3] == b"BZh":
            data = bz2.BZ2Decompressor().decompress(head, 4096)
            if not data:
                return None  # bzip2 yields nothing before a whole block (up to 900 kB) is in
        elif head[:6] == b"\xfd7zXZ\x00":
            data = lzma.LZMADecompressor().decompress(head, 4096)
    except (zlib.error, OSError, EOFError, lzma.LZMAError) as exc:
        return f"corrupt compressed data ({exc})"
    if len(data) < 512:
        return None if len(head) < SNIFF_BYTES and data == b"" else "it is not a tar archive"
    if data[:512] == b"\0" * 512:
        return None  # an empty tar
    try:
        tarfile.TarInfo.frombuf(data[:512], "utf-8", "surrogateescape")
    except tarfile.HeaderError as exc:
        return f"it is not a tar archive ({exc})"
    return None
