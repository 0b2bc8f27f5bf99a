"""What a build says: ``{"stream"}`` lines as the legacy builder wrote them, the RUN
output as it comes (stderr wrapped in ``ESC[91m ... ESC[0m``, which both SDK suites assert),
``{"aux": {"ID"}}`` for ``--iidfile``, and in quiet mode (``q=1``) nothing but the image id
unless the build fails, when what was held back (the last ``QUIET_KEEP`` bytes) is sent
before the error.

A step whose image is still being made when the next step starts (a COPY's layer being
hashed while the next RUN runs) owes its `` ---> <id>`` line: ``hold`` keeps what follows,
in order, until ``release`` writes that line first (a writer past ``HOLD_BYTES`` waits)."""

from __future__ import annotations

import codecs
from collections import deque
from typing import Any

import trio

from svc.errors import SvcError

Message = dict[str, Any]
RED, RESET = "\x1b[91m", "\x1b[0m"
QUIET_KEEP = 1 << 20  # bytes of output a quiet build holds back (the latest are kept)
HOLD_BYTES = 1 << 20  # bytes kept while a line is owed (``Output.hold``) before writers wait


class StepFailed(SvcError):
    """A build step failed; ``code`` is the exit code of a failed RUN (errorDetail.code)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class Output:
    """The build's messages, into the response's channel (held back in quiet mode)."""

    def __init__(self, send: trio.MemorySendChannel[Message], *, quiet: bool) -> None:
        self.send = send
        self.quiet = quiet
        self.held: deque[Message] = deque()
        self.held_bytes = 0
        self.dropped = 0
        self._owed: deque[Message] | None = None  # what waits for an owed line (``hold``)
        self._owed_bytes = 0
        self._paid = trio.Event()
        self._lock = trio.Lock()  # one writer at a time: ``release`` and the steps

    def hold(self) -> None:
        """Keep every message from now on until ``release``."""
        self._owed, self._owed_bytes, self._paid = deque(), 0, trio.Event()

    async def release(self, line: str | None) -> None:
        """``line`` (if any), then what ``hold`` kept, then the messages flow again."""
        async with self._lock:
            if line is not None:
                await self._emit({"stream": line + "\n"})
            while self._owed:
                await self._emit(self._owed.popleft())
            self._owed = None
            self._paid.set()

    async def _put(self, msg: Message) -> None:
        while self._owed is not None and self._owed_bytes >= HOLD_BYTES:
            await self._paid.wait()
        if self._owed is not None:
            self._owed.append(msg)
            self._owed_bytes += len(msg.get("stream", ""))
            return
        async with self._lock:
            await self._emit(msg)

    async def _emit(self, msg: Message) -> None:
        if not self.quiet:
            await self.send.send(msg)
            return
        self.held.append(msg)
        self.held_bytes += len(msg.get("stream", ""))
        while self.held_bytes > QUIET_KEEP and len(self.held) > 1:
            gone = len(self.held.popleft().get("stream", ""))
            self.held_bytes -= gone
            self.dropped += gone

    async def message(self, msg: Message) -> None:
        """Any message as it is (a pull's progress)."""
        await self._put(msg)

    async def line(self, text: str) -> None:
        await self._put({"stream": text + "\n"})

    async def stdout(self, text: str) -> None:
        if text:
            await self._put({"stream": text})

    async def stderr(self, text: str) -> None:
        if text:
            await self._put({"stream": RED + text + RESET})

    async def result(self, image_id: str, tags: list[str]) -> None:
        """The end of a successful build."""
        await self.send.send({"aux": {"ID": image_id}})
        if self.quiet:
            await self.send.send({"stream": image_id + "\n"})
            return
        await self.line(f"Successfully built {image_id.removeprefix('sha256:')[:12]}")
        for tag in tags:
            await self.line(f"Successfully tagged {tag}")

    async def release_held(self) -> None:
        """A failed quiet build: what it said, before the error."""
        held, self.held = self.held, deque()
        if self.dropped:
            await self.send.send({"stream": f"(quiet build: {self.dropped} bytes of earlier "
                                            "output were not kept)\n"})
        for msg in held:
            await self.send.send(msg)


class StreamText:
    """Bytes of one output stream to text, never splitting a UTF-8 sequence."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return str(self._dec.decode(data))
