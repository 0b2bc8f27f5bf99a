"""The limits a connection's request heads are held to, as sans-IO bookkeeping.

dockerd (Go's ``net/http``) caps a request head at 1 MiB and answers 431; hypercorn's h11
would wait forever for the end of a head that never comes, answer nothing to bytes that are
not HTTP until the end of a head that never comes, and keep a connection that never sends a
request open for ever. ``HeadGuard`` sees every byte a connection sends before a request head
is complete and says when to refuse:

- the first bytes are not an HTTP method followed by a space: 400 at once (random bytes,
  TLS to a plain socket);
- the request line is longer than ``MAX_REQUEST_LINE``: 414;
- the whole head is longer than ``MAX_HEAD``: 431;
- a head is not complete ``HEAD_TIMEOUT`` seconds after its first byte (a slowloris): 408;
- a new connection sends no request at all for ``HEAD_TIMEOUT`` seconds: closed (after a
  first request, an idle connection stays open for ever, as dockerd keeps it: client pools
  reuse idle connections and break when a daemon closes them).

``MAX_CONNECTIONS`` bounds the open connections (each costs a descriptor and memory): one more
is answered 503 and closed.
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass

MAX_REQUEST_LINE = 64 * 1024
MAX_HEAD = 1024 * 1024
# Tunable for tests (SVC_HEAD_TIMEOUT, seconds); 30 s suits every real client.
HEAD_TIMEOUT = float(os.environ.get("SVC_HEAD_TIMEOUT", "30"))
LINGER_SECONDS = 2.0  # after a refusal, how long the rest of the request is read and dropped
LINGER_BYTES = 64 << 20
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_METHOD_MAX = 32

REASONS = {400: "Bad Request", 408: "Request Timeout", 413: "Payload Too Large",
           414: "URI Too Long", 431: "Request Header Fields Too Large",
           503: "Service Unavailable", 505: "HTTP Version Not Supported"}


def max_connections() -> int:
    """Half the descriptors this process may open (the rest serve containers, files, runc);
    ``SVC_MAX_CONNECTIONS`` sets another number (tests use it to run out of descriptors)."""
    override = os.environ.get("SVC_MAX_CONNECTIONS")
    if override:
        return max(1, int(override))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 100_000
    return max(64, soft // 2)


def raise_nofile() -> int:
    """Raise the soft descriptor limit to the hard one (dockerd runs with a high limit);
    returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


_HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass
class HeadGuard:
    """The bytes of the request head being received (none between requests)."""

    started: float | None = None  # when its first byte came (or the connection opened)
    size: int = 0  # bytes of the head so far
    line_done: bool = False
    method_checked: bool = False
    complete: bool = False  # its end was seen (h11 is about to parse it)
    _prefix: bytes = b""
    _tail: bytes = b""

    def open(self, now: float) -> None:
        """A new connection: its first request is due within ``HEAD_TIMEOUT``."""
        self.started = now

    def on_data(self, data: bytes, now: float) -> int | None:
        """Bytes received while no head is parsed; the status to refuse with, or None."""
        if not data or self.complete:
            return None
        if self.started is None:
            self.started = now
        window = self._tail + data
        end = _HEAD_END.search(window)
        counted = len(data) if end is None else max(0, end.end() - len(self._tail))
        self.size += counted
        self._tail = window[-3:]
        if not self.method_checked:
            status = self._check_method(data)
            if status is not None:
                return status
        if not self.line_done:
            if b"\n" in data[:counted]:
                self.line_done = True
            elif self.size > MAX_REQUEST_LINE:
                return 414
        if self.size > MAX_HEAD:
            return 431
        self.complete = end is not None
        return None

    def _check_method(self, data: bytes) -> int | None:
        self._prefix += data[:_METHOD_MAX + 1]
        head = self._prefix.lstrip(b"\r\n")  # stray CRLFs between requests are allowed
        space = head.find(b" ")
        token = head if space < 0 else head[:space]
        if any(b not in _TOKEN for b in token) or len(token) > _METHOD_MAX or space == 0:
            return 400
        if space > 0:
            self.method_checked = True
            self._prefix = b""
        return None

    def head_done(self) -> None:
        """h11 parsed the head: nothing is pending until the next request's first byte."""
        self.started = None
        self.size = 0
        self.line_done = self.method_checked = self.complete = False
        self._prefix = self._tail = b""

    def overdue(self, now: float) -> bool:
        return self.started is not None and now - self.started > HEAD_TIMEOUT
