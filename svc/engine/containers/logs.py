"""A container's json-file log as the logs endpoint sends it: stdcopy frames without a TTY,
the raw bytes with one; optionally followed until the container stops."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

from svc.engine.containers.container import Container
from svc.engine.containers.log_chunks import raw_chunks, raw_follow
from svc.engine.containers.log_tap import follow_output
from svc.engine.streams import ThreadChunks, thread_iter
from svc.storage.jsonlog.follow import follow as follow_records
from svc.storage.jsonlog.follow import follow_framed
from svc.storage.jsonlog.reader import read_framed, read_logs


def log_stream(c: Container, *, stdout: bool, stderr: bool, since_ns: int, tail: int | None,
               timestamps: bool, follow: bool, raw: bool | None = None
               ) -> AsyncIterator[bytes | ThreadChunks]:
    """The chunks to send: stdcopy frames, or the raw bytes for a TTY (or ``raw``); stretches
    read from the files may come as ``ThreadChunks`` (``streams.expand`` turns them). With
    ``follow`` on a running container the stream ends when it stops (its writer closed):
    served from the output as it is logged (``log_tap``), or, with no writer in this process
    or a ``since`` in the future, by polling the file. Cancellation closes the open files."""
    path = c.log_path
    raw = c.tty if raw is None else raw
    live = c.live
    if not (follow and live is not None and path.exists()):
        return thread_iter(read_log(c, stdout=stdout, stderr=stderr, since_ns=since_ns,
                                    tail=tail, timestamps=timestamps, raw=raw))
    if live.log is not None and not live.exited.is_set() and since_ns <= time.time_ns():
        return follow_output(live.log, c.hub, live.exited, stdout=stdout, stderr=stderr,
                             since_ns=since_ns, tail=tail, timestamps=timestamps, raw=raw)
    if raw:
        return raw_follow(follow_records(path, stdout=stdout, stderr=stderr, since_ns=since_ns,
                                         tail=tail, stop=live.exited,
                                         grown=c.hub.next_publish), timestamps)
    return follow_framed(path, stdout=stdout, stderr=stderr, since_ns=since_ns, tail=tail,
                         timestamps=timestamps, stop=live.exited, grown=c.hub.next_publish)


def log_replay(c: Container, *, stdout: bool, stderr: bool, raw: bool) -> AsyncIterator[bytes]:
    """What the log holds now, as :func:`log_stream` chunks it without ``follow``, read in
    worker threads (an attach's ``logs=1`` replay)."""
    return thread_iter(read_log(c, stdout=stdout, stderr=stderr, since_ns=0, tail=None,
                                timestamps=False, raw=raw))


def follows(c: Container, follow: bool) -> bool:
    """Whether a logs request with ``follow`` streams live (the container runs)."""
    return follow and c.live is not None and c.log_path.exists()


def read_log(c: Container, *, stdout: bool, stderr: bool, since_ns: int, tail: int | None,
             timestamps: bool, raw: bool | None = None) -> Iterator[bytes]:
    """What the log holds now, as :func:`log_stream` chunks it; blocking, for a worker thread.
    Closing the iterator closes the files."""
    raw = c.tty if raw is None else raw
    if not c.log_path.exists():
        return iter(())
    if raw:
        return raw_chunks(read_logs(c.log_path, stdout=stdout, stderr=stderr,
                                    since_ns=since_ns, tail=tail), timestamps)
    return read_framed(c.log_path, stdout=stdout, stderr=stderr, since_ns=since_ns, tail=tail,
                       timestamps=timestamps)
