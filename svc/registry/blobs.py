"""Blob downloads: verified while streaming, resumable from a partial file; existence checks.

:func:`fetch` streams ``GET /v2/<name>/blobs/<digest>`` into a file the caller names (one per
digest, e.g. ``<tmp>/<hex>.partial``), hashing every byte on the way. When that file already
holds a prefix of the blob (an earlier attempt was cancelled or lost its connection), its
bytes are hashed again and only the rest is asked for with ``Range: bytes=N-``; a server that
ignores the range, or answers a different one, makes the download start over. When the last
byte is in, the digest must match: otherwise the file is deleted and :class:`DigestMismatch`
raised, so no caller ever sees unverified content under a digest's name.

Cancellation (or a lost connection, a timeout) leaves the partial file holding every byte
received so far, flushed, and closes the connection; calling :func:`fetch` again resumes
there. Registries redirect blob GETs to storage (S3, CDNs): redirects are followed, and the
``Authorization`` header is not sent to another host.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import trio

from svc.registry import digests
from svc.registry.auth import repository_scope
from svc.registry.client import RegistryClient
from svc.registry.errors import DigestMismatch, RegistryError

# (bytes of the blob on disk so far, total size or None when unknown)
Progress = Callable[[int, int | None], None]
WRITE_BUFFER = 1 << 20
READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Fetched:
    """A completed download: where it is, its size, and how many bytes this call received
    (less than ``size`` when it resumed)."""

    path: Path
    size: int
    received: int
    resumed_from: int


async def exists(client: RegistryClient, name: str, digest: str) -> int | None:
    """The blob's size when the repository has it (``HEAD``), None when it does not."""
    digests.check(digest)
    answer = await client.request("HEAD", f"/v2/{name}/blobs/{digest}", ok=(200, 404),
                                  scopes=(repository_scope(name, "pull"),),
                                  follow_redirects=True, what=f"blob {digest}")
    if answer.status == 404:
        return None
    length = answer.headers.get("content-length", "")
    return int(length) if length.isdigit() else 0


async def read(client: RegistryClient, name: str, digest: str, *,
               limit: int = 16 << 20) -> bytes:
    """A small blob (an image config) read whole into memory and verified."""
    answer = await client.request("GET", f"/v2/{name}/blobs/{digests.check(digest)}",
                                  scopes=(repository_scope(name, "pull"),), limit=limit,
                                  follow_redirects=True, what=f"blob {digest}")
    if not digests.matches(digest, answer.body):
        raise DigestMismatch(f"blob {digest}: content has digest {digests.of(answer.body)}",
                             code="DIGEST_INVALID")
    return answer.body


async def fetch(client: RegistryClient, name: str, digest: str, partial: Path, *,
                size: int | None = None, progress: Progress | None = None) -> Fetched:
    """Download a blob into ``partial`` (resuming it) and verify it.

    Args:
        partial: the file for this digest; created, appended to, or restarted.
        size: the size the manifest gives, when known: a longer partial file is discarded
            and a longer body refused.
        progress: called with (bytes on disk, total) as data arrives.

    Returns:
        The verified download; the caller moves ``partial`` where it belongs.

    Raises:
        DigestMismatch: the complete content does not match (``partial`` is deleted).
        NotFound: the repository has no such blob.
        Unreachable / RegistryError: as the client raises them (``partial`` is kept).
    """
    digests.check(digest)
    for _ in range(3):
        have = await _length(partial)
        if size is not None and have > size:
            await trio.Path(partial).unlink(missing_ok=True)
            have = 0
        hasher = await _hash_file(partial, digest, have)
        result = await _transfer(client, name, digest, partial, have, hasher, size, progress)
        if result is not None:
            return result
        await trio.Path(partial).unlink(missing_ok=True)  # the server would not resume
    raise RegistryError(f"blob {digest}: the registry does not serve consistent ranges")


async def _transfer(client: RegistryClient, name: str, digest: str, partial: Path, have: int,
                    hasher: hashlib._Hash, size: int | None,
                    progress: Progress | None) -> Fetched | None:
    """One GET; None when the answer cannot continue the partial file (start over)."""
    headers = {"Range": f"bytes={have}-"} if have else {}
    async with client.stream("GET", f"/v2/{name}/blobs/{digest}", ok=(200, 206, 416),
                             scopes=(repository_scope(name, "pull"),), headers=headers,
                             follow_redirects=True, what=f"blob {digest}") as response:
        if response.status_code == 416 or (have and response.status_code == 200):
            if response.status_code == 416 and _finish(hasher, digest, have, size):
                return Fetched(partial, have, 0, have)
            return None
        if have and not response.headers.get("content-range", "").startswith(
                f"bytes {have}-"):
            return None
        length = response.headers.get("content-length", "")
        total = have + int(length) if length.isdigit() else size
        received = 0
        buffer = bytearray()
        async with await trio.open_file(partial, "ab") as out:
            try:
                async for chunk in response.aiter_raw():
                    hasher.update(chunk)
                    buffer += chunk
                    received += len(chunk)
                    if size is not None and have + received > size:
                        break
                    if len(buffer) >= WRITE_BUFFER:
                        await out.write(bytes(buffer))
                        buffer.clear()
                    if progress is not None:
                        progress(have + received, total)
            finally:
                with trio.CancelScope(shield=True):  # keep what arrived: it resumes later
                    await out.write(bytes(buffer))
    if size is not None and have + received > size:
        await trio.Path(partial).unlink(missing_ok=True)
        raise DigestMismatch(f"blob {digest}: more than the {size} bytes announced",
                             code="SIZE_INVALID")
    if not _finish(hasher, digest, have + received, size):
        await trio.Path(partial).unlink(missing_ok=True)
        raise DigestMismatch(f"blob {digest}: downloaded content has digest "
                             f"{hasher.name}:{hasher.hexdigest()}", code="DIGEST_INVALID")
    return Fetched(partial, have + received, received, have)


def _finish(hasher: hashlib._Hash, digest: str, length: int, size: int | None) -> bool:
    ok = f"{hasher.name}:{hasher.hexdigest()}" == digest
    return ok and (size is None or length == size)


async def _length(path: Path) -> int:
    try:
        return (await trio.Path(path).stat()).st_size
    except FileNotFoundError:
        return 0


async def _hash_file(path: Path, digest: str, length: int) -> hashlib._Hash:
    """A hasher fed with the first ``length`` bytes of ``path`` (what a resume continues)."""
    hasher = digests.hasher(digest)
    if length == 0:
        return hasher
    async with await trio.open_file(path, "rb") as f:
        left = length
        while left > 0:
            chunk = await f.read(min(READ_CHUNK, left))
            if not chunk:
                break
            hasher.update(chunk)
            left -= len(chunk)
    return hasher
