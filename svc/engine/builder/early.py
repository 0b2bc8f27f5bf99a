"""A look at the start of a context as it arrives: is the instructions file its first file?

Then the build can start at once (``Builder.receive``): its text is taken from the first
bytes, parsed, and the steps that need no context run while the rest of the upload arrives
(``Builder.build``). The first file is the first entry of the archive that is not a
directory nor an ignore file at the top (``.svcignore``, ``.dockerignore``, which may come
before it). Only the file the build would read counts: the one the request names, else
``Svcfile`` (a ``Dockerfile`` first could still be outranked by a ``Svcfile`` later on).

Anything unsure (another file first, a symlink, an archive that does not parse, more than
``PEEK_PLAIN`` bytes before the answer) says "not first", and the context is then read whole
before the response starts, as before. The chunks read here are replayed to the unpacker.

Cancellation: nothing is held; the chunks read are dropped.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from svc.engine.builder.context import MAX_SVCFILE, ContextError, clean_name
from svc.engine.streams import ThreadReadable
from svc.storage.compression import PrefixDecoder, Prefixed
from svc.svcfile.ignore import IGNORE_FILES

PEEK_PLAIN = MAX_SVCFILE + (1 << 20)  # plain bytes looked at, at most
PEEK_RAW = 4 * PEEK_PLAIN  # bytes of the body read for it, at most


@dataclass
class Peek:
    """What the look found: the instructions file (name, content) if it comes first, the
    chunks read, and whether the body ended meanwhile."""

    first: tuple[str, bytes] | None = None
    chunks: list[bytes] = field(default_factory=list)
    ended: bool = False


def wanted_name(svcfile: str | None) -> str | None:
    """The context path of the instructions file the build reads if it comes first."""
    if not svcfile:
        return "Svcfile"
    try:
        return clean_name(svcfile) or None
    except ContextError:
        return None


_MORE = object()  # not decided yet: more bytes are needed


def first_file(plain: bytes, wanted: str) -> tuple[str, bytes] | None | object:
    """(name, content) if ``wanted`` is the archive's first file, None if it is not,
    ``_MORE`` if ``plain`` (the archive's start) is too short to say."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(plain), mode="r:")  # noqa: SIM115
    except tarfile.ReadError:
        return _MORE if len(plain) < 2 * tarfile.BLOCKSIZE else None
    except (tarfile.TarError, EOFError, ValueError, UnicodeError):
        return None
    with tar:
        while True:
            try:
                member = tar.next()
            except (tarfile.TarError, EOFError, ValueError, UnicodeError):
                member = None  # cut short (more to come), or damaged: the end decides
            if member is None:
                return _MORE if tar.offset + 2 * tarfile.BLOCKSIZE > len(plain) else None
            try:
                name = clean_name(member.name)
            except ContextError:
                return None
            if member.isdir() or name in IGNORE_FILES:
                continue
            if name != wanted or not member.isreg() or member.size > MAX_SVCFILE:
                return None
            end = member.offset_data + member.size
            if end > len(plain):
                return _MORE
            return name, plain[member.offset_data:end]


async def peek(chunks: AsyncIterator[bytes], svcfile: str | None) -> Peek:
    """Read the body's first chunks until it is known whether the instructions file comes
    first. The caller replays ``Peek.chunks`` (then the rest of ``chunks``) to the unpacker."""
    out = Peek()
    wanted = wanted_name(svcfile)
    decoder = PrefixDecoder()
    plain = bytearray()
    raw = 0
    while wanted is not None:
        try:
            chunk = await chunks.__anext__()
        except StopAsyncIteration:
            out.ended = True
            plain += decoder.feed(b"", last=True)
            found = first_file(bytes(plain), wanted)
            out.first = found if isinstance(found, tuple) else None
            return out
        out.chunks.append(chunk)
        raw += len(chunk)
        plain += decoder.feed(chunk)
        found = first_file(bytes(plain), wanted) if plain else _MORE
        if found is not _MORE or decoder.failed or raw > PEEK_RAW or len(plain) > PEEK_PLAIN:
            out.first = found if isinstance(found, tuple) else None
            return out
    return out


class Replay:
    """The whole body again: the chunks the look read, then the rest; a worker thread reads
    it itself when the rest allows it (``streams.ThreadReadable``)."""

    def __init__(self, peeked: Peek, rest: AsyncIterator[bytes]) -> None:
        self._peeked = peeked
        self._rest = rest

    def __aiter__(self) -> Replay:
        return self

    async def __anext__(self) -> bytes:
        if self._peeked.chunks:
            return self._peeked.chunks.pop(0)
        if self._peeked.ended:
            raise StopAsyncIteration
        return await self._rest.__anext__()

    @property
    def thread_readable(self) -> bool:
        rest = self._rest
        return self._peeked.ended or (isinstance(rest, ThreadReadable)
                                      and rest.thread_readable)

    @asynccontextmanager
    async def thread_file(self) -> AsyncIterator[Any]:
        head, self._peeked.chunks = self._peeked.chunks, []
        if self._peeked.ended:
            yield Prefixed(head, io.BytesIO())
            return
        assert isinstance(self._rest, ThreadReadable)
        async with self._rest.thread_file() as rest:
            yield Prefixed(head, rest)


def replay(peeked: Peek, rest: AsyncIterator[bytes]) -> Replay:
    """The whole body again: the chunks the look read, then the rest."""
    return Replay(peeked, rest)
