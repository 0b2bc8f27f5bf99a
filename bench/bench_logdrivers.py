"""Log drivers (issue 28): lines per second and MB/s of a container's output shipped by each
driver to a real receiver, beside json-file; and the container's own write rate with its
receiver down.

A container writes ``LINES`` lines of 100 bytes (``yes`` of a 99-digit word, through ``head``).
The clock starts before the create request and stops when the last line has arrived: for
json-file when the container has exited (its log is written by then); for fluentd, GELF over
TCP and syslog over TCP when the receiver has counted every line; for journald when
``journalctl`` counts them in the private journal. Receivers: the tests' fluentd forward and
GELF receivers (decoding every message in Python, in a thread of this process), rsyslogd and
a private systemd-journald (``tests/support``).

Receiver down: the same container with fluentd pointed at a port where nothing listens,
``fluentd-async-connect`` and ``mode=non-blocking``: the time from create to exit, beside
json-file's. (In blocking mode it would wait for the receiver, by design.)
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import trio

from bench import dockerapi, procs
from bench.bench_containers import Client
from bench.bench_streams import attach_output
from bench.context import Context
from bench.harness import Figure, Outcome, Target

LINE = 100
WRITER = ["sh", "-c", "yes $(printf %0{w}d 0) | head -n {n}"]


def _cmd(lines: int) -> list[str]:
    return [WRITER[0], WRITER[1], WRITER[2].format(w=LINE - 1, n=lines)]


def _run(sock: Path, lines: int, log_config: dict[str, Any],
         arrived: Callable[[], bool] | None = None, timeout: float = 300) -> float:
    """Seconds from the create request until the container has exited and (``arrived``) its
    receiver has every line."""
    with dockerapi.Client(sock) as c:
        t0 = time.perf_counter()
        body = {"Image": dockerapi.BUSYBOX, "Cmd": _cmd(lines),
                "HostConfig": {"NetworkMode": "none", "LogConfig": log_config}}
        cid = str(c.json("POST", "/containers/create", body, 201)["Id"])
        c.start(cid)
        c.wait(cid)
        deadline = time.monotonic() + timeout
        while arrived is not None and not arrived():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{log_config['Type']}: not every line arrived within "
                                   f"{timeout:.0f} s")
            time.sleep(0.02)
        took = time.perf_counter() - t0
        c.remove(cid)
    return took


@contextlib.contextmanager
def _in_thread(make: Callable[[], Any]) -> Iterator[Any]:
    """A trio receiver (an async context manager from ``make``) run in a thread of its own."""
    ready, stop = threading.Event(), threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        async with make() as rx:
            box["rx"] = rx
            ready.set()
            while not stop.is_set():
                await trio.sleep(0.05)

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the receiver did not start")
    try:
        yield box["rx"]
    finally:
        stop.set()
        thread.join(10)


def _rate(lines: int, seconds: float) -> tuple[float, float]:
    return lines / seconds, lines * LINE / seconds / 1e6


def _journald(ctx: Context, lines: int) -> float:
    """On a daemon of its own, pointed at a private journal."""
    from tests.support.journald import private_journald

    with private_journald() as journal:
        # (its bridge is named for what follows the last "-": not the run daemon's name,
        # which this daemon's stop would otherwise delete under the run's own daemon)
        wd = ctx.workdir / f"jd-j{ctx.workdir.name.rsplit('-', 1)[-1][:7]}"
        wd.mkdir(exist_ok=True)
        bip = "10.198.0.1/16"
        d = procs.daemon(wd, env={"SVC_JOURNAL_SOCKET": journal.socket,
                                  "SVC_JOURNAL_DIRECTORY": journal.directory}, bip=bip)
        d.start()
        try:
            dockerapi.ensure_busybox(d.socket, ctx.workdir)

            def arrived() -> bool:
                out = subprocess.run(["journalctl", f"--directory={journal.directory}",
                                      "--output=cat", "--no-pager", "-q"],
                                     capture_output=True, check=False).stdout
                return out.count(b"\n") >= lines

            return _run(d.socket, lines, {"Type": "journald", "Config": {}}, arrived)
        finally:
            procs.stop_daemon(d, wd, bip)


def logdrivers(ctx: Context) -> Outcome:
    """Lines/s and MB/s per log driver beside json-file; the write rate with the receiver
    down."""
    from tests.support.fluentd_receiver import fluentd_receiver
    from tests.support.gelf_receiver import gelf_receiver
    from tests.support.rsyslog import rsyslog

    sock = ctx.daemon.socket
    dockerapi.ensure_busybox(sock, ctx.workdir)
    lines = ctx.scaled(200_000, 2_000)
    rates: dict[str, float] = {}
    rates["json-file"] = _run(sock, lines, {"Type": "json-file", "Config": {}})
    c = Client(sock)
    try:
        attach_json = attach_output(ctx, c, {"Type": "json-file", "Config": {}})
    finally:
        c.close()
    with _in_thread(fluentd_receiver) as rx:
        rates["fluentd"] = _run(sock, lines, {"Type": "fluentd", "Config": {
            "fluentd-address": rx.address}}, lambda: len(rx.entries) >= lines)
        c = Client(sock)
        try:
            attach = attach_output(ctx, c, {"Type": "fluentd", "Config": {
                "fluentd-address": rx.address}})
        finally:
            c.close()
    with _in_thread(gelf_receiver) as rx:
        rates["gelf (tcp)"] = _run(sock, lines, {"Type": "gelf", "Config": {
            "gelf-address": rx.tcp_address}}, lambda: len(rx.messages) >= lines)
    with rsyslog() as rs:
        rates["syslog (tcp)"] = _run(sock, lines, {"Type": "syslog", "Config": {
            "syslog-address": f"tcp://127.0.0.1:{rs.tcp}"}},
            lambda: rs.out.exists() and rs.out.read_bytes().count(b"\n") >= lines)
    rates["journald"] = _journald(ctx, lines)
    down = _run(sock, lines, {"Type": "fluentd", "Config": {
        "fluentd-address": "127.0.0.1:9", "fluentd-async-connect": "true",
        "mode": "non-blocking"}})
    out = Outcome(details={"lines": lines, "seconds": {k: round(v, 3) for k, v in
                                                       rates.items()},
                           "receiver_down_seconds": round(down, 3)})
    base_lps, base_mbs = _rate(lines, rates["json-file"])
    for name, seconds in rates.items():
        lps, mbs = _rate(lines, seconds)
        out.figures += [
            Figure("logdrivers", f"{name}: lines/s", lps, "lines/s",
                   note=f"{lines:,} lines of {LINE} bytes, until the last arrived"
                   + ("" if name == "json-file" else f"; json-file {base_lps:,.0f}")),
            Figure("logdrivers", f"{name}: MB/s", mbs, "MB/s"),
        ]
    out.figures.append(Figure(
        "logdrivers", "attach output, 200 MiB, with the fluentd driver", attach, "MB/s",
        Target(">=", 300), note=f"the attach target; with json-file {attach_json:.0f} MB/s "
                                "(it escapes each zero byte as \\u0000); the receiver "
                                "decodes in this process"))
    out.figures.append(Figure(
        "logdrivers", "container's writes with its fluentd receiver down (non-blocking)",
        _rate(lines, down)[1], "MB/s", Target(">=", 0.5 * base_mbs),
        note=f"json-file {base_mbs:.1f} MB/s; target: at least half of it"))
    return out
