"""svc-shim (``svc.runtime.shim``) against the real runc: the daemon reads the container's own
pipes while connected; while it is not, the shim drains them into its spool, which reads back
exactly; stdin and the pty are handed over; the exit code is told and kept in a file."""

from __future__ import annotations

import fcntl
import json
import os
import struct
import termios
from pathlib import Path

import pytest
import trio

from svc.runtime.process import wait_pid
from svc.runtime.protocol import RuntimeFailure
from svc.runtime.shim import spool
from svc.runtime.shim.channel import ShimChannel
from svc.runtime.shim.launch import Launched, Shim, ShimFiles, find_binary
from svc.runtime.shim.peek import PeekedPipe
from tests.runtime.conftest import TIMEOUT, RuncEnv

pytestmark = pytest.mark.skipif(
    not os.access(find_binary(), os.X_OK),
    reason=f"no svc-shim at {find_binary()} (scripts/setup.sh builds it)")


async def _launch(rt: RuncEnv, tmp_path: Path, args: list[str], *, terminal: bool = False,
                  stdin: bool = False, spool_max: int = 256 << 20
                  ) -> tuple[str, ShimFiles, Launched]:
    cid, bundle = rt.bundle(args)
    if terminal:
        spec = json.loads((bundle / "config.json").read_text())
        spec["process"]["terminal"] = True
        (bundle / "config.json").write_text(json.dumps(spec))
    files = ShimFiles(tmp_path / "shims" / cid)
    with trio.fail_after(TIMEOUT):
        launched = await Shim(rt.runc, spool_max=spool_max).launch(
            cid, files, bundle, terminal=terminal, stdin=stdin)
    return cid, files, launched


async def _read_to_end(fd: int) -> bytes:
    os.set_blocking(fd, False)
    out = bytearray()
    while True:
        await trio.lowlevel.wait_readable(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        except OSError:  # EIO: a pty whose other side is gone
            break
        if not chunk:
            break
        out += chunk
    trio.lowlevel.notify_closing(fd)
    os.close(fd)
    return bytes(out)


async def _gone_daemon(files: ShimFiles) -> None:
    """A daemon that connects, as the launching one does at once, and goes away."""
    channel = await ShimChannel.connect(files.socket)
    for fd in channel.hello.fds:
        os.close(fd)
    channel.close()


async def _wait_gone(pid: int) -> None:
    with trio.fail_after(TIMEOUT):
        await wait_pid(pid)


async def test_the_daemon_reads_the_pipes_and_is_told_the_exit(rt: RuncEnv,
                                                               tmp_path: Path) -> None:
    script = "echo out; echo err >&2; exit 7"
    cid, files, launched = await _launch(rt, tmp_path, ["sh", "-c", script])
    assert launched.pid > 0 and launched.shim_pid != launched.pid
    channel = await ShimChannel.connect(files.socket)
    assert channel.hello.exit is None and channel.hello.spool_size == 0
    out_fd, err_fd, *journals = channel.hello.fds
    _close(journals)
    await rt.runc.start(cid)
    got: dict[str, bytes] = {}

    async def read(name: str, fd: int) -> None:
        got[name] = await _read_to_end(fd)

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as outer:
            outer.start_soon(channel.run)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, "out", out_fd)
                nursery.start_soon(read, "err", err_fd)
                ended = await channel.wait_exit()
            outer.cancel_scope.cancel()
    assert got == {"out": b"out\n", "err": b"err\n"}
    assert ended is not None and ended[0] == 7
    assert files.exit_status() == ended
    channel.done()
    channel.close()
    await _wait_gone(launched.shim_pid)
    assert not files.socket.exists()
    await rt.runc.delete(cid)


async def test_output_without_a_daemon_goes_to_the_spool_and_reads_back(
        rt: RuncEnv, tmp_path: Path) -> None:
    script = "for i in $(seq 1 3000); do echo line-$i; echo err-$i >&2; done; sleep 30"
    cid, files, launched = await _launch(rt, tmp_path, ["sh", "-c", script])
    await _gone_daemon(files)
    await rt.runc.start(cid)  # no daemon connected: all of it goes to the spool
    with trio.fail_after(TIMEOUT):
        while True:
            channel = await ShimChannel.connect(files.socket)
            if channel.hello.spool_size and b"err-3000" in _joined(files, channel, "stderr"):
                break
            for fd in channel.hello.fds:
                os.close(fd)
            channel.close()
            await trio.sleep(0.05)
    hello = channel.hello
    assert hello.dropped == 0 and hello.exit is None
    assert _joined(files, channel, "stdout") == b"".join(b"line-%d\n" % i for i in range(1, 3001))
    assert _joined(files, channel, "stderr") == b"".join(b"err-%d\n" % i for i in range(1, 3001))
    recs = list(spool.records(files.spool, 0, hello.spool_size))
    assert recs[-1].end == hello.spool_size
    assert all(0 < r.ts_ns <= s.ts_ns for r, s in zip(recs, recs[1:], strict=False))
    # read and kept: acknowledged, and its space given back
    channel.ack(hello.spool_size)
    spool.punch(files.spool, hello.spool_size)
    assert os.stat(files.spool).st_blocks * 512 <= 4096  # (the last, partial block stays)
    for fd in hello.fds:
        os.close(fd)
    channel.close()
    await rt.runc.delete(cid, force=True)
    await _wait_gone(launched.shim_pid)
    assert files.exit_status() is not None and files.exit_status()[0] == 137  # type: ignore[index]


def _joined(files: ShimFiles, channel: ShimChannel, stream: str) -> bytes:
    return b"".join(r.data for r in spool.records(files.spool, 0, channel.hello.spool_size)
                    if r.stream == stream)


async def test_an_end_while_no_daemon_is_there_is_kept_with_all_the_output(
        rt: RuncEnv, tmp_path: Path) -> None:
    cid, files, launched = await _launch(rt, tmp_path, ["sh", "-c", "seq 1 50000; exit 3"])
    await _gone_daemon(files)
    await rt.runc.start(cid)
    await _wait_gone(launched.shim_pid)  # it drained, wrote the exit, and went
    status = files.exit_status()
    assert status is not None and status[0] == 3
    data = b"".join(r.data for r in spool.records(files.spool, 0, os.stat(files.spool).st_size))
    assert data == b"".join(b"%d\n" % i for i in range(1, 50001))
    await rt.runc.delete(cid)


async def test_a_daemon_that_goes_and_comes_back_misses_nothing(rt: RuncEnv,
                                                                tmp_path: Path) -> None:
    script = "i=0; while [ $i -lt 4000 ]; do i=$((i+1)); echo $i; done; read x; echo after-$x"
    cid, files, launched = await _launch(rt, tmp_path, ["sh", "-c", script], stdin=True)
    first = await ShimChannel.connect(files.socket)
    out_fd, err_fd, *journals, in_fd = first.hello.fds
    _close(journals)
    await rt.runc.start(cid)
    os.set_blocking(out_fd, False)
    with trio.fail_after(TIMEOUT):  # the daemon reads some, then goes
        await trio.lowlevel.wait_readable(out_fd)
    part = os.read(out_fd, 100)
    for fd in (out_fd, err_fd, in_fd):
        os.close(fd)
    first.close()
    with trio.fail_after(TIMEOUT):  # the rest waits in the spool
        while not files.spool.exists() or b"\n4000\n" not in _spooled(files):
            await trio.sleep(0.05)
    second = await ShimChannel.connect(files.socket)
    out_fd, err_fd, *journals, in_fd = second.hello.fds
    _close(journals)
    os.write(in_fd, b"x\n")
    os.close(in_fd)
    rest = _spooled(files)[: second.hello.spool_size]
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(second.run)
            live = await _read_to_end(out_fd)
            await second.wait_exit()
            nursery.cancel_scope.cancel()
    assert part + rest + live == b"".join(b"%d\n" % i for i in range(1, 4001)) + b"after-x\n"
    os.close(err_fd)
    second.done()
    second.close()
    await _wait_gone(launched.shim_pid)
    await rt.runc.delete(cid)


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def _spooled(files: ShimFiles) -> bytes:
    return b"".join(r.data for r in spool.records(files.spool, 0, os.stat(files.spool).st_size))


async def test_a_full_spool_counts_what_it_drops(rt: RuncEnv, tmp_path: Path) -> None:
    cid, files, launched = await _launch(rt, tmp_path, ["sh", "-c", "seq 1 100000; sleep 30"],
                                         spool_max=64 << 10)
    await _gone_daemon(files)
    await rt.runc.start(cid)
    total = sum(len(b"%d\n" % i) for i in range(1, 100001))
    with trio.fail_after(TIMEOUT):
        while True:
            channel = await ShimChannel.connect(files.socket)
            hello = channel.hello
            for fd in hello.fds:
                os.close(fd)
            channel.close()
            kept = sum(len(r.data) for r in spool.records(files.spool, 0, hello.spool_size)) \
                if hello.spool_size else 0
            if kept + hello.dropped == total:
                break
            await trio.sleep(0.05)
    assert hello.spool_size <= 64 << 10 and hello.dropped > 0
    await rt.runc.delete(cid, force=True)
    await _wait_gone(launched.shim_pid)


async def test_a_terminal_is_handed_over_and_resized(rt: RuncEnv, tmp_path: Path) -> None:
    cid, files, launched = await _launch(
        rt, tmp_path, ["sh", "-c", "read x; stty size; echo got-$x"], terminal=True)
    channel = await ShimChannel.connect(files.socket)
    (master,) = channel.hello.fds
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    await rt.runc.start(cid)
    os.write(master, b"hi\n")
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.run)
            out = await _read_to_end(master)
            ended = await channel.wait_exit()
            nursery.cancel_scope.cancel()
    assert b"33 111\r\n" in out and b"got-hi\r\n" in out
    assert ended is not None and ended[0] == 0
    channel.done()
    channel.close()
    await _wait_gone(launched.shim_pid)
    await rt.runc.delete(cid)


async def test_an_exec_is_held_as_an_init_is(rt: RuncEnv, tmp_path: Path) -> None:
    cid, files, launched = await _launch(rt, tmp_path, ["sleep", "60"])
    await _gone_daemon(files)
    await rt.runc.start(cid)
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["sh", "-c", "echo in-exec; exit 5"], "cwd": "/",
                                   "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}}))
    exec_files = ShimFiles(tmp_path / "exec-shim")
    with trio.fail_after(TIMEOUT):
        held = await Shim(rt.runc).launch(cid, exec_files, process=process)
        await _gone_daemon(exec_files)
        await _wait_gone(held.shim_pid)  # no daemon: drained into its spool, then gone
    assert exec_files.exit_status() is not None and exec_files.exit_status()[0] == 5  # type: ignore[index]
    assert _spooled(exec_files) == b"in-exec\n"
    await rt.runc.delete(cid, force=True)
    await _wait_gone(launched.shim_pid)


async def test_runc_failure_is_reported_in_runcs_words(rt: RuncEnv, tmp_path: Path) -> None:
    cid, bundle = rt.bundle(["/no/such/binary"])
    files = ShimFiles(tmp_path / "shim")
    with pytest.raises(RuntimeFailure) as failed, trio.fail_after(TIMEOUT):
        launched = await Shim(rt.runc).launch(cid, files, bundle)
        await rt.runc.start(cid)
        await _wait_gone(launched.shim_pid)
    assert "no such file" in str(failed.value).lower() or "not found" in str(failed.value).lower()


async def test_a_shim_costs_little_memory(rt: RuncEnv, tmp_path: Path) -> None:
    """Item 6 of the live-restore issue: at most 2 MiB RSS per container's monitor (the
    figure goes to bench/; here, the bound with room to spare)."""
    cid, files, launched = await _launch(rt, tmp_path, ["sh", "-c", "seq 1 200000; sleep 30"])
    await _gone_daemon(files)
    await rt.runc.start(cid)
    with trio.fail_after(TIMEOUT):
        while not files.spool.exists() or os.stat(files.spool).st_size < 1_000_000:
            await trio.sleep(0.05)
    status = Path(f"/proc/{launched.shim_pid}/status").read_text()
    rss_kib = int(next(line.split()[1] for line in status.splitlines()
                       if line.startswith("VmRSS:")))
    print(f"svc-shim RSS after 1.3 MB of output: {rss_kib} KiB")
    assert rss_kib <= 1024
    await rt.runc.delete(cid, force=True)
    await _wait_gone(launched.shim_pid)


async def test_what_the_daemon_has_not_logged_is_drained_and_what_it_has_is_not(
        rt: RuncEnv, tmp_path: Path) -> None:
    """A peeked pipe: a chunk leaves the pipe only when the daemon moves it into the
    journal, where the shim counts it; a daemon gone between copying a chunk and moving it
    leaves it to the spool, at its stream's offset."""
    cid, files, launched = await _launch(
        rt, tmp_path, ["sh", "-c", "echo one; read x; echo two; read x; echo three; sleep 30"],
        stdin=True)
    channel = await ShimChannel.connect(files.socket)
    out_fd, err_fd, out_journal, err_journal, in_fd = channel.hello.fds
    pipe = PeekedPipe(out_fd, out_journal, head=0, logged=0)
    await rt.runc.start(cid)
    with trio.fail_after(TIMEOUT):
        assert await pipe.receive_some() == b"one\n"
        pipe.consume()  # logged: moved into the journal, where the shim counts it
        os.write(in_fd, b"\n")
        assert await pipe.receive_some() == b"two\n"  # ("one" has left the pipe)
        assert pipe.offset == 8
    pipe.close()  # gone before moving it: "two" stays in the pipe
    _close([err_fd, err_journal])
    channel.close()
    os.write(in_fd, b"\n")
    with trio.fail_after(TIMEOUT):
        while b"three" not in (_spooled(files) if files.spool.exists() else b""):
            await trio.sleep(0.02)
    recs = list(spool.records(files.spool, 0, os.stat(files.spool).st_size))
    assert recs[0].at == 4 and recs[0].data.startswith(b"two\n")  # (one read, or two)
    assert b"".join(r.data for r in recs) == b"two\nthree\n"
    again = await ShimChannel.connect(files.socket)
    assert again.hello.taken == (14, 0)
    for fd in again.hello.fds:
        os.close(fd)
    again.close()
    os.close(in_fd)
    await rt.runc.delete(cid, force=True)
    await _wait_gone(launched.shim_pid)


async def test_an_exec_that_ends_before_the_daemon_connects_waits_for_it(
        rt: RuncEnv, tmp_path: Path) -> None:
    """The launching daemon connects right after the report; an exec may have ended by then:
    its output and its end wait for the daemon, not for nobody."""
    cid, files, launched = await _launch(rt, tmp_path, ["sleep", "60"])
    await _gone_daemon(files)
    await rt.runc.start(cid)
    process = tmp_path / "process.json"
    process.write_text(json.dumps({"args": ["echo", "quick"], "cwd": "/",
                                   "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}}))
    exec_files = ShimFiles(tmp_path / "exec-shim")
    with trio.fail_after(TIMEOUT):
        held = await Shim(rt.runc).launch(cid, exec_files, process=process)
        await trio.sleep(0.5)  # it has ended
        channel = await ShimChannel.connect(exec_files.socket)
        out_fd, err_fd, *journals = channel.hello.fds
        _close(journals)
        assert channel.hello.exit is not None and channel.hello.exit[0] == 0
        assert await _read_to_end(out_fd) == b"quick\n"
        os.close(err_fd)
        channel.done()
        channel.close()
        await _wait_gone(held.shim_pid)
    await rt.runc.delete(cid, force=True)
    await _wait_gone(launched.shim_pid)
