"""The gelf driver against the tests' GELF receiver (tests/support/gelf_receiver.py): every
field as moby v1.11 sent it, the three compressions, chunking, TCP framing and reconnection,
and the options refused."""

from __future__ import annotations

import secrets
from typing import Any

import pytest
import trio

from svc.logdrivers import gelf
from svc.logdrivers.base import Info, Message, OptionError, ReceiverDown
from tests.support.gelf_receiver import gelf_receiver

CID = "0123456789ab" + "c" * 52
IID = "sha256:" + "fedcba987654" + "0" * 52
CREATED = 1_700_000_000_500_000_000  # 2023-11-14T22:13:20.5Z
T = 1_700_000_001_123_456_789


def info(**config: str) -> Info:
    return Info(config=config, container_id=CID, container_name="/web", image_id=IID,
                image_name="busybox:latest", created_ns=CREATED, entrypoint="sh",
                args=["-c", "echo hi"], env=["A=1", "B=two"],
                labels={"team": "core", "_under": "u"}, hostname="testhost")


def msg(line: bytes, source: str = "stdout", t: int = T) -> Message:
    return Message(line=line, source=source, time_ns=t)


def driver(**config: str) -> gelf.GelfDriver:
    d = gelf.create(info(**config))
    assert isinstance(d, gelf.GelfDriver)
    return d


FIXED = {"version": "1.1", "host": "testhost", "timestamp": 1700000001.123,
         "_container_id": CID, "_container_name": "web", "_image_id": IID,
         "_image_name": "busybox:latest", "_command": "sh -c echo hi", "_tag": CID[:12],
         "_created": "2023-11-14T22:13:20.5Z"}


def expected(short: str, level: int, **extra: Any) -> dict[str, Any]:
    return {**FIXED, "short_message": short, "level": level, **extra}


async def test_udp_sends_every_field_as_v1_11_did() -> None:
    async with gelf_receiver() as rx:
        d = driver(**{"gelf-address": rx.udp_address, "labels": "team,_under", "env": "B"})
        await d.send([msg(b"hello <b>&"), msg(b"oops \xff", "stderr")])
        got = await rx.wait_for(2)
        await d.aclose()
    assert got == [expected("hello <b>&", 6, _team="core", _under="u", _B="two"),
                   expected("oops \ufffd", 3, _team="core", _under="u", _B="two")]
    assert rx.kinds == ["gzip", "gzip"]  # go-gelf's default
    assert rx.errors == []


@pytest.mark.parametrize(("ctype", "level", "kind"), [
    ("gzip", "9", "gzip"), ("zlib", "1", "zlib"), ("zlib", "-1", "zlib"),
    ("none", "0", "json"), ("gzip", "0", "gzip")])
async def test_compression_types_and_levels(ctype: str, level: str, kind: str) -> None:
    async with gelf_receiver() as rx:
        d = driver(**{"gelf-address": rx.udp_address, "gelf-compression-type": ctype,
                      "gelf-compression-level": level, "tag": "{{.Name}}/{{.ImageName}}"})
        await d.send([msg(b"x" * 3000)])
        got = await rx.wait_for(1)
        await d.aclose()
    assert got == [expected("x" * 3000, 6, _tag="web/busybox:latest")]
    assert rx.kinds == [kind]


async def test_a_100_kb_line_goes_in_chunks_and_arrives_whole() -> None:
    line = secrets.token_hex(50_000).encode()  # 100 KB that gzip cannot shrink to one chunk
    async with gelf_receiver() as rx:
        plain = driver(**{"gelf-address": rx.udp_address, "gelf-compression-type": "none"})
        zipped = driver(**{"gelf-address": rx.udp_address})
        await plain.send([msg(line)])
        await rx.wait_for(1)
        await zipped.send([msg(line)])
        got = await rx.wait_for(2)
        await plain.aclose()
        await zipped.aclose()
    assert [m["short_message"] for m in got] == [line.decode()] * 2
    raw = len(plain.encoder.json(msg(line)))
    assert rx.chunk_counts[0] == -(-raw // gelf.CHUNK_DATA) == 72
    assert 30 < rx.chunk_counts[1] < 72  # gzip halves hex
    assert rx.errors == []


async def test_a_line_past_128_chunks_is_dropped_and_counted() -> None:
    huge = secrets.token_hex(100_000).encode()  # 200 KB uncompressed: 143 chunks
    async with gelf_receiver() as rx:
        d = driver(**{"gelf-address": rx.udp_address, "gelf-compression-type": "none"})
        await d.send([msg(b"before"), msg(huge), msg(b""), msg(b"after")])
        got = await rx.wait_for(2)
        await trio.sleep(0.1)
        await d.aclose()
    assert [m["short_message"] for m in got] == ["before", "after"]  # the empty line: unsent
    assert d.dropped == 1
    assert rx.errors == []


def test_chunk_headers() -> None:
    mid = bytes(range(8))
    assert gelf.chunks(b"a" * 1420, mid) == [b"a" * 1420]
    two = gelf.chunks(b"a" * 1421, mid)
    assert two is not None and [c[:12] for c in two] == [b"\x1e\x0f" + mid + b"\x00\x02",
                                                        b"\x1e\x0f" + mid + b"\x01\x02"]
    assert [len(c) for c in two] == [1420, 12 + 13]
    exact = gelf.chunks(b"a" * 1408 * 3, mid)  # no empty fourth chunk (go-gelf sent one)
    assert exact is not None and [len(c) for c in exact] == [1420] * 3
    assert gelf.chunks(b"a" * 1408 * 128, mid) is not None
    assert gelf.chunks(b"a" * (1408 * 128 + 1), mid) is None


def test_created_as_go_writes_a_time() -> None:
    assert gelf.go_rfc3339_nano(CREATED) == "2023-11-14T22:13:20.5Z"
    assert gelf.go_rfc3339_nano(1_700_000_000_000_000_000) == "2023-11-14T22:13:20Z"
    assert gelf.go_rfc3339_nano(1_700_000_000_000_000_001) == "2023-11-14T22:13:20.000000001Z"


async def test_tcp_frames_are_null_delimited_json_in_order() -> None:
    async with gelf_receiver() as rx:
        d = driver(**{"gelf-address": rx.tcp_address})
        for start in range(0, 300, 100):
            await d.send([msg(b"line %d" % i) for i in range(start, start + 100)])
        got = await rx.wait_for(300)
        await d.aclose()
    assert [m["short_message"] for m in got] == [f"line {i}" for i in range(300)]
    assert got[0] == expected("line 0", 6)
    assert rx.kinds == ["json"] * 300
    assert gelf.Encoder("h", {}).frame(msg(b"a")).endswith(b"}\0")


async def test_tcp_reconnects_after_the_receiver_restarts() -> None:
    async with gelf_receiver() as rx:
        d = driver(**{"gelf-address": rx.tcp_address, "gelf-tcp-reconnect-delay": "0"})
        await d.send([msg(b"one")])
        await rx.wait_for(1)
        await rx.stop_tcp()
        for _ in range(3):
            with pytest.raises(ReceiverDown):
                await d.send([msg(b"two")])
        await rx.start_tcp()
        await d.send([msg(b"two"), msg(b"three")])
        got = await rx.wait_for(3)
        await d.aclose()
    assert [m["short_message"] for m in got] == ["one", "two", "three"]
    assert d.dropped == 0


async def test_tcp_max_reconnect_gives_a_batch_up_and_counts_it() -> None:
    async with gelf_receiver() as rx:
        address = rx.tcp_address
        await rx.stop_tcp()
        d = driver(**{"gelf-address": address, "gelf-tcp-reconnect-delay": "0",
                      "gelf-tcp-max-reconnect": "2"})
        for _ in range(2):  # the attempt and the first retry
            with pytest.raises(ReceiverDown):
                await d.send([msg(b"a"), msg(b"b")])
        await d.send([msg(b"a"), msg(b"b")])  # the second retry fails too: given up
        assert d.dropped == 2
        with pytest.raises(ReceiverDown):  # the next batch is tried again
            await d.send([msg(b"c")])
        await d.aclose()


async def test_tcp_waits_its_reconnect_delay() -> None:
    async with gelf_receiver() as rx:
        d = driver(**{"gelf-address": rx.tcp_address, "gelf-tcp-reconnect-delay": "1"})
        await rx.stop_tcp()
        with pytest.raises(ReceiverDown, match="cannot connect"):
            await d.send([msg(b"a")])
        await rx.start_tcp()
        with pytest.raises(ReceiverDown, match="waiting"):
            await d.send([msg(b"a")])
        await d.aclose()


async def test_connect_opens_the_socket_or_fails() -> None:
    async with gelf_receiver() as rx:
        address = rx.tcp_address
        ok = driver(**{"gelf-address": rx.udp_address})
        await ok.connect()
        await ok.aclose()
        await rx.stop_tcp()
        with pytest.raises(ReceiverDown):
            await driver(**{"gelf-address": address}).connect()


@pytest.mark.parametrize(("config", "message"), [
    ({}, "gelf-address is a required parameter"),
    ({"gelf-address": "127.0.0.1:12201"}, "gelf: endpoint needs to be TCP or UDP"),
    ({"gelf-address": "http://h:1"}, "gelf: endpoint needs to be TCP or UDP"),
    ({"gelf-address": "udp://host"}, "gelf: please provide gelf-address as proto://host:port"),
    ({"gelf-address": "udp://h:1", "foo": "x"}, 'unknown log opt "foo" for gelf log driver'),
    ({"gelf-address": "udp://h:1", "fluentd-address": "x"},
     'unknown log opt "fluentd-address" for gelf log driver'),
    ({"gelf-address": "udp://h:1", "gelf-compression-type": "lz4"},
     'unknown value "lz4" for log opt "gelf-compression-type" for gelf log driver'),
    ({"gelf-address": "udp://h:1", "gelf-compression-level": "10"},
     'unknown value "10" for log opt "gelf-compression-level" for gelf log driver'),
    ({"gelf-address": "udp://h:1", "gelf-compression-level": "x"},
     'unknown value "x" for log opt "gelf-compression-level" for gelf log driver'),
    ({"gelf-address": "tcp://h:1", "gelf-compression-type": "gzip"},
     "compression is only supported on UDP"),
    ({"gelf-address": "udp://h:1", "gelf-tcp-max-reconnect": "3"},
     '"gelf-tcp-max-reconnect" is only valid for TCP'),
    ({"gelf-address": "tcp://h:1", "gelf-tcp-reconnect-delay": "-1"},
     '"gelf-tcp-reconnect-delay" must be a positive integer'),
    ({"gelf-address": "udp://h:1", "tag": "{{.Nope}}"}, "{{.Nope}}"),
    ({"gelf-address": "udp://h:1", "mode": "fast"}, "unknown log mode: fast"),
    ({"gelf-address": "udp://h:1", "max-buffer-size": "lots"}, "invalid max-buffer-size"),
])
def test_options_refused(config: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as exc:
        gelf.validate(config)
    assert message in str(exc.value)


def test_options_accepted() -> None:
    gelf.validate({"gelf-address": "udp://[::1]:12201", "gelf-compression-type": "none",
                   "gelf-compression-level": "-1", "tag": "{{.ID}}", "gelf-tag": "x",
                   "labels": "a", "env": "b", "labels-regex": "^a", "env-regex": "^b",
                   "mode": "non-blocking", "max-buffer-size": "4m"})
    gelf.validate({"gelf-address": "tcp://graylog:12201", "gelf-tcp-max-reconnect": "3",
                   "gelf-tcp-reconnect-delay": "1"})
    assert gelf.parse_address("udp://[::1]:12201")[1].host == "::1"


async def test_udp_to_a_closed_port_raises_receiver_down() -> None:
    async with gelf_receiver() as rx:
        address = rx.udp_address
    d = driver(**{"gelf-address": address})  # nothing listens there any more
    with pytest.raises(ReceiverDown, match="cannot send GELF message"):
        for _ in range(10):  # the port unreachable comes back after a first datagram
            await d.send([msg(b"lost")])
            await trio.sleep(0.01)
    await d.aclose()
