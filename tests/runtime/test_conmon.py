"""Containers under conmon (``svc.runtime.conmon``), against the real conmon and runc: the
output read back from conmon's log exactly, from a cursor without repeats, across conmon's
replacement of a full log; stdin through its socket; the exit code in its exit file."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import trio

from svc.runtime.conmon.attach import MonitorInput
from svc.runtime.conmon.logtail import LogTail
from svc.runtime.conmon.monitor import MonitorFiles
from svc.runtime.process import wait_gone
from svc.runtime.protocol import RuntimeFailure
from tests.runtime.conftest import TIMEOUT, RuncEnv
from tests.support.conmon import Conmon, Monitored

pytestmark = pytest.mark.skipif(shutil.which("conmon") is None, reason="no conmon on PATH")


async def _launch(rt: RuncEnv, tmp_path: Path, args: list[str], *, stdin: bool = False,
                  stdin_once: bool = False, log_max: int = 64 << 20
                  ) -> tuple[str, MonitorFiles, Monitored]:
    cid, bundle = rt.bundle(args)
    files = MonitorFiles(tmp_path / "monitors" / cid, bundle, cid)
    conmon = Conmon(rt.runc, tmp_path / "sockets")
    with trio.fail_after(TIMEOUT):
        mon = await conmon.launch(cid, files, stdin=stdin, stdin_once=stdin_once,
                                  log_max=log_max)
    return cid, files, mon


async def _read_all(files: MonitorFiles, mon: Monitored,
                    tail: LogTail) -> list[tuple[str, bytes]]:
    gone = trio.Event()

    async def watch() -> None:
        await wait_gone(mon.monitor_pid)
        gone.set()
        tail.wake()

    out: list[tuple[str, bytes]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        with trio.fail_after(TIMEOUT):
            async for batch in tail.follow(gone):
                out += [(r.stream, r.data) for r in batch.records]
    return out


def _joined(records: list[tuple[str, bytes]], stream: str) -> bytes:
    return b"".join(d for s, d in records if s == stream)


async def test_output_and_exit_code_come_back_from_conmon(rt: RuncEnv, tmp_path: Path) -> None:
    script = "echo out; echo err >&2; printf 'no newline'; printf '\\n\\n'; exit 7"
    cid, files, mon = await _launch(rt, tmp_path, ["sh", "-c", script])
    assert mon.pid > 0 and mon.monitor_pid > 0 and mon.pid != mon.monitor_pid
    tail = LogTail(str(files.log))
    try:
        await rt.runc.start(cid)
        records = await _read_all(files, mon, tail)
    finally:
        tail.close()
    assert _joined(records, "stdout") == b"out\nno newline\n\n"
    assert _joined(records, "stderr") == b"err\n"
    assert files.exit_code() == 7
    await rt.runc.delete(cid)


async def test_a_cursor_resumes_without_repeats_or_losses(rt: RuncEnv, tmp_path: Path) -> None:
    cid, files, mon = await _launch(rt, tmp_path, ["sh", "-c", "seq 1 20000"])
    await rt.runc.start(cid)
    first = LogTail(str(files.log))
    try:
        with trio.fail_after(TIMEOUT):
            taken: list[bytes] = []
            while b"".join(taken).count(b"\n") < 100:
                taken += [r.data for r in first.read_available().records]
                await trio.sleep(0.01)
        cursor = first.cursor
    finally:
        first.close()  # the daemon goes away; the container goes on writing
    second = LogTail(str(files.log), cursor)
    try:
        rest = await _read_all(files, mon, second)
    finally:
        second.close()
    assert not second.lost
    lines = b"".join(taken) + _joined(rest, "stdout")
    assert lines == b"".join(b"%d\n" % i for i in range(1, 20001))
    await rt.runc.delete(cid)


async def test_a_replaced_log_is_followed_and_a_lost_one_is_told(rt: RuncEnv,
                                                                 tmp_path: Path) -> None:
    script = "i=0; while [ $i -lt 300 ]; do echo line-$i; i=$((i+1)); sleep 0.002; done"
    cid, files, mon = await _launch(rt, tmp_path, ["sh", "-c", script], log_max=4096)
    tail = LogTail(str(files.log))
    stale = tail.cursor
    try:
        await rt.runc.start(cid)
        records = await _read_all(files, mon, tail)
    finally:
        tail.close()
    got = _joined(records, "stdout").splitlines()
    assert got == [b"line-%d" % i for i in range(300)]  # read while written: none lost
    late = LogTail(str(files.log), stale)  # a cursor of a file that has been replaced since
    try:
        assert late.lost
    finally:
        late.close()
    await rt.runc.delete(cid)


async def test_stdin_through_the_socket_and_half_close_is_eof(rt: RuncEnv,
                                                              tmp_path: Path) -> None:
    """With ``StdinOnce`` the socket's half-close is the container's EOF."""
    cid, files, mon = await _launch(rt, tmp_path, ["sh", "-c", "cat; echo done"], stdin=True,
                                    stdin_once=True)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tail = LogTail(str(files.log))
    try:
        await sock.connect(str(files.attach))
        await rt.runc.start(cid)
        await sock.send(b"hello\n")
        await sock.send(b"world\n")
        sock.shutdown(socket.SHUT_WR)
        records = await _read_all(files, mon, tail)
    finally:
        sock.close()
        tail.close()
    assert _joined(records, "stdout") == b"hello\nworld\ndone\n"
    assert files.exit_code() == 0
    await rt.runc.delete(cid)


async def test_stdin_reaches_a_container_whose_bundle_path_is_long(rt: RuncEnv,
                                                                   tmp_path: Path) -> None:
    """The attach socket's whole path may be longer than a socket address holds (107
    bytes): the daemon connects through its directory's descriptor."""
    cid, bundle = rt.bundle(["sh", "-c", "cat; echo done"])
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    bundle = Path(shutil.move(bundle, deep / bundle.name))
    files = MonitorFiles(tmp_path / "monitors" / cid, bundle, cid)
    assert len(str(files.attach)) > 108
    with trio.fail_after(TIMEOUT):
        mon = await Conmon(rt.runc, tmp_path / "s").launch(cid, files, stdin=True,
                                                           stdin_once=True)
    tail = LogTail(str(files.log))
    stdin = await MonitorInput.connect(files.attach, bundle / "ctl")
    try:
        await rt.runc.start(cid)
        await stdin.send_all(b"x" * 100_000)
        await stdin.aclose()
        records = await _read_all(files, mon, tail)
    finally:
        stdin.close()
        tail.close()
    assert _joined(records, "stdout") == b"x" * 100_000 + b"done\n"
    await rt.runc.delete(cid)


async def test_a_failed_create_carries_runcs_words(rt: RuncEnv, tmp_path: Path) -> None:
    cid, bundle = rt.bundle(["true"])
    spec = (bundle / "config.json").read_text()
    (bundle / "config.json").write_text(spec.replace(str(rt.rootfs), "/no/such/rootfs"))
    files = MonitorFiles(tmp_path / "monitors" / cid, bundle, cid)
    with pytest.raises(RuntimeFailure) as info:
        with trio.fail_after(TIMEOUT):
            await Conmon(rt.runc, tmp_path / "sockets").launch(cid, files)
    assert str(info.value) == "invalid rootfs: stat /no/such/rootfs: no such file or directory"
    assert info.value.command == "create"
    assert await rt.runc.list() == []
