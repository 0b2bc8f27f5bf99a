"""Error kinds raised by the engine and its adapters.

No HTTP lives here: ``svc.api.errors`` alone turns a kind into a status code and a body, so the
engine states *what* went wrong and the edge decides how a given API version shows it.
"""

from __future__ import annotations


class SvcError(Exception):
    """Base of every error kind; ``str(err)`` is the message a client sees."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidParameter(SvcError):
    """The request names a bad value: a query parameter, a body field, a path."""


class NotFound(SvcError):
    """The object the request names does not exist."""


class PathNotFound(NotFound):
    """A path in a container's files does not exist; the message names the container as the
    client did (the api knows how: ``in_container``)."""

    def __init__(self, path: str, container: str) -> None:
        super().__init__(f"Could not find the file {path} in container {container}")
        self.path = path

    def in_container(self, ref: str) -> PathNotFound:
        return PathNotFound(self.path, ref)


class Unauthorized(SvcError):
    """A registry refused the credentials, or wants some (``docker login``, push, pull)."""


class Conflict(SvcError):
    """The request is valid but clashes with the current state (name in use, running, ...)."""


class NotModified(SvcError):
    """Nothing to do: the object is already in the requested state (start, stop)."""


class Forbidden(SvcError):
    """The operation is refused on this object (read-only volume, builtin network)."""


class NotAcceptable(SvcError):
    """The request cannot be honoured for this object (attach to a stopped container)."""


class Unavailable(SvcError):
    """The daemon cannot do this now (shutting down, a kernel feature is missing)."""


class Unsupported(SvcError):
    """This svc does not offer the operation (yet); the message says what to use instead."""


class SystemError_(SvcError):  # noqa: N801 - trailing underscore avoids the builtin
    """An unexpected failure of the machine (disk, runtime) that the client cannot fix."""


class NoSpace(SystemError_):
    """The disk (or a quota) is full. What the operation had made is undone: it can be tried
    again once there is room."""


NO_SPACE_ERRNOS = frozenset({28, 122})  # ENOSPC, EDQUOT


def as_no_space(exc: BaseException, what: str = "") -> NoSpace | None:
    """``exc`` (an OSError, maybe inside one-member exception groups) as a ``NoSpace`` naming
    ``what`` failed, when it is one; else None."""
    cause = unwrap(exc)
    if not isinstance(cause, OSError) or cause.errno not in NO_SPACE_ERRNOS:
        return None
    where = f" ({cause.filename})" if cause.filename else ""
    lead = f"{what}: " if what else ""
    return NoSpace(f"{lead}no space left on device{where}: free some space and try again")


def unwrap(exc: BaseException) -> BaseException:
    """The one error inside nested exception groups of one member each (what a nursery
    raises when a single task failed), so that clients read the error itself, never
    "Exceptions from Trio nursery (1 sub-exception)"."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
