"""The syslog driver against a real, private rsyslogd (tests.support.rsyslog) on each
transport: the raw message rsyslog received and what it parsed of it (priority, facility,
severity, hostname, app-name, procid, msgid, timestamp), the framing, TLS with a client
certificate, a receiver that goes away and comes back; and the options."""

from __future__ import annotations

import datetime as dt
import os
import secrets
import socket
import ssl
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trustme

from svc.logdrivers import pump as pump_module
from svc.logdrivers import syslog
from svc.logdrivers.base import Info, Message, OptionError, ReceiverDown
from svc.logdrivers.pump import LogPump
from tests.support.rsyslog import Rsyslog, rsyslog

T = 1_700_000_000_123_456_789
HOST = socket.gethostname()
PID = os.getpid()


def info(**config: str) -> Info:
    return Info(config=config, container_id=secrets.token_hex(32), container_name="/s",
                image_id="sha256:" + "0" * 64, image_name="busybox", created_ns=0)


def msg(line: bytes, source: str = "stdout") -> Message:
    return Message(line=line, source=source, time_ns=T)


def local(micro: bool = False) -> str:
    """T as Go's RFC 3339 in the local zone, computed apart from the driver's code."""
    when = dt.datetime.fromtimestamp(T // 10**9).astimezone().replace(
        microsecond=T % 10**9 // 1000)
    text = when.isoformat(timespec="microseconds" if micro else "seconds")
    return text.replace("+00:00", "Z")


def stamp3164() -> str:
    return time.strftime("%b %e %H:%M:%S", time.localtime(T // 10**9))


@pytest.fixture(scope="module")
def server() -> Iterator[Rsyslog]:
    with rsyslog() as r:
        yield r


async def deliver(config: dict[str, str], *msgs: Message) -> str:
    """Send ``msgs`` through a new driver; the tag (a fresh container's id) to look for."""
    i = info(**config)
    drv = syslog.create(i)
    await drv.send(msgs)
    await drv.aclose()
    return i.id


# options


def test_unknown_options_are_refused_with_the_engines_words() -> None:
    with pytest.raises(OptionError, match="unknown log opt 'gelf-address' for syslog"):
        syslog.validate({"gelf-address": "udp://x"})


@pytest.mark.parametrize(("config", "words"), [
    ({"syslog-address": "127.0.0.1:514"}, "should be in form proto://address"),
    ({"syslog-address": "http://x"}, "should be in form proto://address"),
    ({"syslog-address": "unix:///no/such/socket"}, "no such file"),
    ({"syslog-address": "tcp://h:99999"}, "invalid port"),
    ({"syslog-facility": "local8"}, "invalid syslog facility"),
    ({"syslog-facility": "24"}, "invalid syslog facility"),
    ({"syslog-format": "rfc9999"}, "Invalid syslog format"),
    ({"syslog-tls-cert": "/c.pem"}, "syslog-tls-key"),
    ({"syslog-tls-skip-verify": "maybe"}, "syslog-tls-skip-verify"),
    ({"tag": "{{.Bad}}"}, "tag"), ({"mode": "x"}, "mode")])
def test_malformed_values_are_refused_naming_the_option(config: dict[str, str],
                                                        words: str) -> None:
    with pytest.raises(OptionError, match=words):
        syslog.validate(config)


def test_addresses_and_facilities() -> None:
    assert syslog.parse_address("udp://10.0.0.1") == syslog.Address("udp", "10.0.0.1", 514)
    assert syslog.parse_address("tcp+tls://[::1]:6514") == syslog.Address("tcp+tls", "::1",
                                                                          6514)
    assert syslog.parse_address("") == syslog.Address()
    assert syslog.parse_facility("") == 3 and syslog.parse_facility("local7") == 23
    assert syslog.parse_facility("authpriv") == 10 and syslog.parse_facility("17") == 17
    syslog.validate({"syslog-address": "tcp://h", "syslog-facility": "0", "labels": "a",
                     "env": "b", "env-regex": "c", "labels-regex": "d", "syslog-tag": "x",
                     "syslog-format": "rfc5424micro", "syslog-tls-skip-verify": "",
                     "max-buffer-size": "1m", "mode": "non-blocking"})


# against rsyslog


def only(records: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(records) == 1, records
    return records[0]


async def test_udp_rfc5424_as_rsyslog_parsed_it(server: Rsyslog) -> None:
    tag = await deliver({"syslog-address": f"udp://127.0.0.1:{server.udp}",
                         "syslog-format": "rfc5424", "syslog-facility": "local3"},
                        msg(b"hello udp"))
    r = only(server.wait_records(1, contains=tag))
    assert r["raw"] == f"<158>1 {local()} {HOST} {tag} {PID} {tag} - hello udp"
    assert (r["input"], r["pri"], r["facility"], r["severity"]) == ("udp", "158", "19", "6")
    assert (r["version"], r["hostname"], r["app"], r["procid"], r["msgid"], r["sd"],
            r["msg"]) == ("1", HOST, tag, str(PID), tag, "-", "hello udp")
    assert r["reported"] == local()


async def test_tcp_lines_are_newline_framed_in_order(server: Rsyslog) -> None:
    i = info(**{"syslog-address": f"tcp://127.0.0.1:{server.tcp}",
                "syslog-format": "rfc3164"})
    tag = i.id
    drv = syslog.create(i)
    await drv.send([msg(b"one"), msg(b"two", "stderr"), msg(b"three\nfour " + tag.encode())])
    await drv.aclose()
    got = server.wait_records(4, contains=tag)
    assert [r["raw"] for r in got] == [
        f"<30>{stamp3164()} {HOST} {tag}[{PID}]: one",
        f"<27>{stamp3164()} {HOST} {tag}[{PID}]: two",
        f"<30>{stamp3164()} {HOST} {tag}[{PID}]: three",
        f"four {tag}"]  # a newline inside a line ends the frame: moby's framing had that flaw
    assert [(r["facility"], r["severity"], r["hostname"], r["tag"]) for r in got[:2]] == [
        ("3", "6", HOST, f"{tag}[{PID}]:"), ("3", "3", HOST, f"{tag}[{PID}]:")]


async def test_tls_rfc5424micro_is_octet_counted_with_a_client_certificate(
        server: Rsyslog) -> None:
    tag = await deliver({"syslog-address": f"tcp+tls://127.0.0.1:{server.tls}",
                         "syslog-format": "rfc5424micro",
                         "syslog-tls-ca-cert": server.path("ca.pem"),
                         "syslog-tls-cert": server.path("client.pem"),
                         "syslog-tls-key": server.path("client.key")},
                        msg(b"first\nsecond"), msg(b"err", "stderr"))
    got = server.wait_records(2, contains=tag)
    assert [r["raw"] for r in got] == [  # the newline stays inside its frame (escaped)
        f"<30>1 {local(micro=True)} {HOST} {tag} {PID} {tag} - first#012second",
        f"<27>1 {local(micro=True)} {HOST} {tag} {PID} {tag} - err"]
    assert got[0]["input"] == "tls" and got[0]["reported"] == local(micro=True)


async def test_tls_refuses_a_server_its_ca_did_not_sign_unless_told_to_skip(
        server: Rsyslog, tmp_path: os.PathLike[str]) -> None:
    other = os.path.join(tmp_path, "other-ca.pem")
    trustme.CA().cert_pem.write_to_path(other)
    config = {"syslog-address": f"tcp+tls://127.0.0.1:{server.tls}",
              "syslog-tls-ca-cert": other, "syslog-tls-cert": server.path("client.pem"),
              "syslog-tls-key": server.path("client.key")}
    drv = syslog.create(info(**config))
    with pytest.raises(ReceiverDown, match="CERTIFICATE_VERIFY_FAILED"):
        await drv.send([msg(b"never")])
    tag = await deliver({**config, "syslog-tls-skip-verify": "true"}, msg(b"skipped"))
    assert only(server.wait_records(1, contains=tag))["raw"].endswith(f"{tag}[{PID}]: skipped")


async def test_unix_stream_and_datagram(server: Rsyslog) -> None:
    for proto, path in (("unix", server.stream_sock), ("unixgram", server.dgram_sock)):
        tag = await deliver({"syslog-address": f"{proto}://{path}", "syslog-facility": "2"},
                            msg(b"via " + proto.encode()))
        r = only(server.wait_records(1, contains=tag))
        assert r["raw"] == f"<22>{stamp3164()} {tag}[{PID}]: via {proto}"
        assert (r["facility"], r["severity"], r["app"]) == ("2", "6", tag)


async def test_the_local_syslog_is_found_as_srslog_found_it(
        server: Rsyslog, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = os.path.join(server.path("absent.sock"))
    monkeypatch.setattr(syslog, "LOCAL_PATHS", (absent, server.stream_sock, server.dgram_sock))
    tag = await deliver({}, msg(b"local"))  # a datagram socket first, on any of the paths
    assert only(server.wait_records(1, contains=tag))["input"] == "imuxsock"
    monkeypatch.setattr(syslog, "LOCAL_PATHS", (absent, server.stream_sock))
    tag = await deliver({}, msg(b"local"))
    assert only(server.wait_records(1, contains=tag))["input"] == "unix"


async def test_a_receiver_that_goes_away_is_noticed_and_reached_again() -> None:
    with rsyslog() as server:
        i = info(**{"syslog-address": f"tcp://127.0.0.1:{server.tcp}"})
        drv = syslog.create(i)
        await drv.send([msg(b"one")])
        server.wait_records(1, contains=i.id)
        server.stop_process()
        await trio.sleep(0.1)  # the kernel has the receiver's FIN
        with pytest.raises(ReceiverDown, match="closed the connection"):
            await drv.send([msg(b"two")])  # not written into the dead connection
        with pytest.raises(ReceiverDown, match="connect"):
            await drv.send([msg(b"two")])
        server.start()
        await drv.send([msg(b"two"), msg(b"three")])
        got = server.wait_records(3, contains=i.id)
        assert [r["msg"].strip() for r in got] == ["one", "two", "three"]
        await drv.aclose()


# the bytes on the wire, captured by a bare listener


async def capture(config: dict[str, str], tls: bool, *msgs: Message) -> tuple[str, bytes]:
    """What the driver writes on one connection to a listener of the test's."""
    ca = trustme.CA()
    got = bytearray()
    done = trio.Event()
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)

    async def serve(stream: trio.abc.Stream) -> None:
        if tls:
            stream = trio.SSLStream(stream, server_ctx, server_side=True)
        while data := await stream.receive_some():
            got.extend(data)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, serve, listeners)
        with tempfile.NamedTemporaryFile(suffix=".pem") as pem:
            ca.cert_pem.write_to_path(pem.name)
            proto = "tcp+tls" if tls else "tcp"
            i = info(**config, **{"syslog-address": f"{proto}://127.0.0.1:{port}",
                                  "syslog-tls-ca-cert": pem.name})
            drv = syslog.create(i)
            await drv.send(msgs)
            await drv.aclose()
        with trio.fail_after(5):
            await done.wait()
        nursery.cancel_scope.cancel()
    return i.id, bytes(got)


@pytest.mark.parametrize("fmt", ["rfc5424", "rfc5424micro"])
async def test_rfc5424_over_tls_is_octet_counted_byte_for_byte(fmt: str) -> None:
    tag, got = await capture({"syslog-format": fmt}, True, msg(b"a"), msg(b"b\nc", "stderr"))
    stamp = local(micro=fmt == "rfc5424micro")
    one = f"<30>1 {stamp} {HOST} {tag} {PID} {tag} - a\n".encode()
    two = f"<27>1 {stamp} {HOST} {tag} {PID} {tag} - b\nc\n".encode()
    assert got == b"%d %s%d %s" % (len(one), one, len(two), two)


async def test_over_plain_tcp_messages_are_newline_ended_without_counts() -> None:
    tag, got = await capture({"syslog-format": "rfc5424"}, False, msg(b"a"), msg(b"b"))
    assert got == (f"<30>1 {local()} {HOST} {tag} {PID} {tag} - a\n"
                   f"<30>1 {local()} {HOST} {tag} {PID} {tag} - b\n").encode()


async def test_through_the_pump_nothing_is_lost_while_the_receiver_is_down(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pump_module, "RETRY_MAX", 0.5)
    with rsyslog() as server:
        i = info(**{"syslog-address": f"tcp://127.0.0.1:{server.tcp}"})
        pump = LogPump(syslog.create(i), mode="blocking", max_bytes=1 << 20)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump.run)
            for n in range(50):
                await pump.put(msg(b"before %d" % n))
            assert len(await server.await_records(50, contains=i.id)) == 50
            server.stop_process()
            await trio.sleep(0.1)
            for n in range(50):
                await pump.put(msg(b"during %d" % n))
            await trio.sleep(0.5)  # the pump retries against a refusing port
            server.start()
            await pump.close(timeout=10)
            nursery.cancel_scope.cancel()
        got = [r["msg"].strip() for r in server.wait_records(100, contains=i.id)]
        assert got == [f"before {n}" for n in range(50)] + [f"during {n}" for n in range(50)]
        assert pump.dropped == 0
