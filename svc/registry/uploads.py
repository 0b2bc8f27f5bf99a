"""Blob uploads: monolithic or chunked, and cross-repository mounts.

An upload opens a session (``POST /v2/<name>/blobs/uploads/`` -> 202 and a ``Location``),
sends the bytes (one ``PUT ?digest=``, or ``PATCH`` chunks with ``Content-Range`` and a final
empty ``PUT ?digest=``, or one streamed ``PATCH`` when the digest is known only at the end),
and the registry verifies the digest itself. With ``mount_from`` the
POST asks to link the blob from another repository of the same registry first
(``?mount=<digest>&from=<repo>``): 201 means done without sending a byte, 202 means the
registry declined and opened an ordinary session instead.

Cancellation (or a failure) leaves the upload session open on the registry, holding what was
sent; registries purge abandoned sessions on their own (distribution: after a week), and the
next push starts a new one. Nothing is left on this side.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterable, AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from svc.lazy import lazy_module
from svc.registry import digests
from svc.registry.auth import repository_scope
from svc.registry.client import Answer, RegistryClient
from svc.registry.errors import DigestMismatch, RegistryError

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_module("httpx")

Source = bytes | Path | Callable[[], AsyncIterable[bytes]]
FILE_CHUNK = 1 << 20


class Pushed(enum.Enum):
    """How a blob got into the repository."""

    UPLOADED = "uploaded"
    MOUNTED = "mounted"


async def push(client: RegistryClient, name: str, digest: str, size: int, source: Source, *,
               mount_from: str | None = None, chunk_size: int | None = None) -> Pushed:
    """Put one blob into repository ``name``.

    Args:
        source: the content: bytes, a file, or a factory of async byte streams (called again
            if the registry asks for authentication half-way).
        mount_from: a repository on the same registry that may have the blob already.
        chunk_size: send ``PATCH`` chunks of this size instead of one ``PUT``.

    Raises:
        RegistryError: refused (``DIGEST_INVALID`` when the content does not match).
    """
    digests.check(digest)
    location = await _start(client, name, digest, mount_from)
    if location is None:
        return Pushed.MOUNTED
    push_scope = (repository_scope(name, "pull", "push"),)
    if chunk_size is None:
        body: bytes | Callable[[], AsyncIterable[bytes]]
        body = source if isinstance(source, bytes) else lambda: _stream(source)
        answer = await client.request(
            "PUT", location, params=_with_digest(location, digest), ok=(201, 204),
            scopes=push_scope, content=body, what=f"blob {digest}",
            headers={"Content-Type": "application/octet-stream",
                     "Content-Length": str(size)})
    else:
        sent = 0
        async for chunk in _chunks(_stream(source), chunk_size):
            patched = await client.request(
                "PATCH", location, ok=(202, 204), scopes=push_scope, content=chunk,
                what=f"blob {digest}",
                headers={"Content-Type": "application/octet-stream",
                         "Content-Range": f"{sent}-{sent + len(chunk) - 1}",
                         "Content-Length": str(len(chunk))})
            sent += len(chunk)
            location = _next_location(patched, location)
        answer = await client.request(
            "PUT", location, params=_with_digest(location, digest), ok=(201, 204),
            scopes=push_scope, content=b"", what=f"blob {digest}",
            headers={"Content-Length": "0"})
    stored = answer.headers.get("docker-content-digest", digest)
    if stored != digest:
        raise DigestMismatch(f"blob {digest}: the registry stored {stored}")
    return Pushed.UPLOADED


async def push_streamed(client: RegistryClient, name: str,
                        chunks: Callable[[], AsyncIterable[bytes]],
                        digest: Callable[[], str]) -> str:
    """Put one blob whose digest is known only once its bytes are all sent: one ``PATCH``
    with a chunked body (compression and upload overlap), then ``PUT ?digest=``.

    Args:
        chunks: the content; called once (a registry that asks for authentication half-way
            through the body fails the upload instead of getting it again).
        digest: called after ``chunks`` ended: the digest of what was sent.

    Returns:
        The digest the registry stored (the same, or :class:`DigestMismatch`).
    """
    location = await _start(client, name, "", None)
    assert location is not None
    push_scope = (repository_scope(name, "pull", "push"),)
    calls = 0

    def body() -> AsyncIterable[bytes]:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise RegistryError(f"upload to {name}: the registry asked for authentication "
                                "in the middle of the upload")
        return chunks()

    patched = await client.request("PATCH", location, ok=(202, 204), scopes=push_scope,
                                   content=body, what=f"upload {name}",
                                   headers={"Content-Type": "application/octet-stream"})
    location = _next_location(patched, location)
    wanted = digests.check(digest())
    answer = await client.request(
        "PUT", location, params=_with_digest(location, wanted), ok=(201, 204),
        scopes=push_scope, content=b"", what=f"blob {wanted}", headers={"Content-Length": "0"})
    stored = answer.headers.get("docker-content-digest", wanted)
    if stored != wanted:
        raise DigestMismatch(f"blob {wanted}: the registry stored {stored}")
    return wanted


async def mount(client: RegistryClient, name: str, digest: str, from_repo: str) -> bool:
    """Try to mount a blob from ``from_repo``; True when mounted, False when declined (the
    session the registry opened instead is left to expire)."""
    return await _start(client, name, digest, from_repo) is None


async def _start(client: RegistryClient, name: str, digest: str,
                 mount_from: str | None) -> str | None:
    """Open an upload session (its absolute URL), or None when the mount succeeded."""
    scopes = [repository_scope(name, "pull", "push")]
    params = None
    if mount_from is not None and digest:
        scopes.append(repository_scope(mount_from, "pull"))
        params = {"mount": digest, "from": mount_from}
    answer = await client.request("POST", f"/v2/{name}/blobs/uploads/", ok=(201, 202),
                                  scopes=tuple(scopes), params=params, content=b"",
                                  headers={"Content-Length": "0"}, what=f"upload {name}")
    if answer.status == 201:
        return None
    return _next_location(answer, None)


def _next_location(answer: Answer, current: str | None) -> str:
    location = answer.headers.get("location")
    if not location:
        if current is None:
            raise RegistryError("the registry opened an upload without a Location")
        return current
    return str(answer.url.join(location))


def _with_digest(location: str, digest: str) -> httpx.QueryParams:
    """The location's own query (upload state) plus ``digest``."""
    return httpx.URL(location).params.set("digest", digest)


async def _stream(source: Source) -> AsyncIterator[bytes]:
    if isinstance(source, bytes):
        yield source
    elif isinstance(source, Path):
        async with await trio.open_file(source, "rb") as f:
            while chunk := await f.read(FILE_CHUNK):
                yield chunk
    else:
        async for chunk in source():
            yield chunk


async def _chunks(stream: AsyncIterator[bytes], size: int) -> AsyncIterator[bytes]:
    """Re-cut a byte stream into pieces of ``size`` (the last one shorter)."""
    buffer = bytearray()
    async for piece in stream:
        buffer += piece
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)
