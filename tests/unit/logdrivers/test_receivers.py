"""The tests' receivers decode what the protocols define, not only what our drivers send:
every fluentd forward mode with EventTime and acks, and GELF input as Graylog refuses it."""

from __future__ import annotations

import gzip
import json
import zlib

import msgpack
import trio

from tests.support.fluentd_receiver import EventTime, fluentd_receiver
from tests.support.gelf_receiver import gelf_receiver


def event_time(sec: int, nsec: int) -> msgpack.ExtType:
    return msgpack.ExtType(0, sec.to_bytes(4, "big") + nsec.to_bytes(4, "big"))


async def test_fluentd_receiver_decodes_every_mode_and_acks() -> None:
    entries = [[1, {"a": "1"}], [event_time(2, 5), {"a": "2"}]]
    packed = b"".join(msgpack.packb(e) for e in entries)
    events = [
        ["t.msg", 7, {"m": "x"}],
        ["t.msg4", event_time(8, 9), {"m": "y"}, {"chunk": "c1"}],
        ["t.fwd", entries],
        ["t.packed", packed, {"chunk": "c2"}],
        ["t.gz", gzip.compress(packed), {"compressed": "gzip"}],
        ["bad"],
    ]
    async with fluentd_receiver() as rx:
        stream = await trio.open_tcp_stream("127.0.0.1", rx.port)
        async with stream:
            await stream.send_all(b"".join(msgpack.packb(e, use_bin_type=True)
                                           for e in events))
            got = await rx.wait_for(8)
            acks: list[object] = []
            unpacker = msgpack.Unpacker()
            while len(acks) < 2:
                unpacker.feed(await stream.receive_some(100))
                acks.extend(unpacker)
    assert [(e.tag, e.time, e.mode) for e in got] == [
        ("t.msg", 7, "message"), ("t.msg4", EventTime(8, 9), "message"),
        ("t.fwd", 1, "forward"), ("t.fwd", EventTime(2, 5), "forward"),
        ("t.packed", 1, "packed"), ("t.packed", EventTime(2, 5), "packed"),
        ("t.gz", 1, "compressed"), ("t.gz", EventTime(2, 5), "compressed")]
    assert acks == [{"ack": "c1"}, {"ack": "c2"}]
    assert len(rx.errors) == 1


async def test_gelf_receiver_refuses_what_graylog_refuses() -> None:
    good = {"version": "1.1", "host": "h", "short_message": "ok", "timestamp": 1.5}
    bad = [{"version": "1.1", "host": "h", "short_message": ""},
           {"version": "1.1", "short_message": "no host"},
           {**good, "_id": "x"}, {**good, "_bad key": "x"}, {**good, "level": "6"}]
    async with gelf_receiver() as rx:
        udp = trio.socket.socket(type=trio.socket.SOCK_DGRAM)
        with udp:
            await udp.connect(("127.0.0.1", rx.udp_port))
            for doc in bad:
                await udp.send(json.dumps(doc).encode())
            await udp.send(zlib.compress(json.dumps(good).encode()))
            await udp.send(b"\x1e\x0f" + bytes(8) + bytes((0, 129)) + b"{}")  # > 128 chunks
            await udp.send(b"\x1e\x0f" + bytes(8) + bytes((2, 2)) + b"{}")  # seq past count
            await rx.wait_for(1)
            await trio.sleep(0.05)
    assert rx.messages == [good]
    assert rx.kinds == ["zlib"]
    assert len(rx.errors) == len(bad) + 2
