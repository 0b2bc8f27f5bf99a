"""The fluentd driver against the tests' forward-protocol receiver
(tests/support/fluentd_receiver.py): the entries as moby v1.11 sent them, order, raw bytes,
split lines, reconnection and the retry options, and the options refused."""

from __future__ import annotations

import os
import tempfile

import pytest
import trio

from svc.logdrivers import fluentd
from svc.logdrivers.base import Info, Message, OptionError, ReceiverDown
from svc.logdrivers.conn import Address
from svc.logdrivers.pump import LogPump
from tests.support.fluentd_receiver import fluentd_receiver, unpack_all

CID = "0123456789ab" + "c" * 52
IID = "sha256:" + "fedcba987654" + "0" * 52
T = 1_700_000_001_923_456_789


def info(**config: str) -> Info:
    return Info(config=config, container_id=CID, container_name="/web", image_id=IID,
                image_name="busybox:latest", created_ns=0, entrypoint="sh",
                args=["-c", "echo hi"], env=["A=1", "B=two"],
                labels={"team": "core", "log": "label wins"}, hostname="testhost")


def msg(line: bytes, source: str = "stdout", partial: bool = False) -> Message:
    return Message(line=line, source=source, time_ns=T, partial=partial)


def driver(**config: str) -> fluentd.FluentdDriver:
    d = fluentd.create(info(**config))
    assert isinstance(d, fluentd.FluentdDriver)
    return d


def test_the_wire_shape_is_v1_11_message_mode() -> None:
    enc = fluentd.Encoder("docker.abc", CID, "/web", {"team": "core"})
    data, _ = enc.encode([msg(b"hi")])
    assert unpack_all(data) == [["docker.abc", 1_700_000_001,
                                 {"container_id": CID, "container_name": "/web",
                                  "source": "stdout", "log": "hi", "team": "core"}, None]]
    assert data[:1] == b"\x94"  # a 4-element array: [tag, time, record, option=nil]
    assert data.endswith(b"\xc0")


async def test_every_field_arrives() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address, "labels": "team", "env": "A"})
        await d.send([msg(b"hello"), msg(b"oops", "stderr")])
        got = await rx.wait_for(2)
        await d.aclose()
    base = {"container_id": CID, "container_name": "/web", "team": "core", "A": "1"}
    assert [(e.tag, e.time, e.record, e.mode, e.option) for e in got] == [
        (f"docker.{CID[:12]}", 1_700_000_001, {**base, "source": "stdout", "log": "hello"},
         "message", None),
        (f"docker.{CID[:12]}", 1_700_000_001, {**base, "source": "stderr", "log": "oops"},
         "message", None)]
    assert rx.errors == []


async def test_an_extra_attribute_replaces_a_fixed_field_as_moby_merged_them() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address, "labels": "log",
                      "tag": "{{.Name}}.{{.ImageName}}"})
        await d.send([msg(b"line")])
        got = await rx.wait_for(1)
        await d.aclose()
    assert got[0].record["log"] == "label wins"
    assert got[0].tag == "web.busybox:latest"


async def test_order_and_raw_bytes_are_kept() -> None:
    lines = [b"line %d \xff\xfe" % i for i in range(1000)]
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address})
        for start in range(0, 1000, 250):
            await d.send([msg(line) for line in lines[start:start + 250]])
        got = await rx.wait_for(1000)
        await d.aclose()
    assert [e.log_bytes() for e in got] == lines
    assert rx.connections == 1


async def test_split_lines_carry_the_partial_fields_of_later_engines() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address})
        await d.send([msg(b"a" * 10, partial=True), msg(b"whole", "stderr")])
        await d.send([msg(b"b", partial=True), msg(b"c"), msg(b"next")])
        got = await rx.wait_for(5)
        await d.aclose()
    parts = [{k: v for k, v in e.record.items() if k.startswith("partial_")} for e in got]
    pid = parts[0]["partial_id"]
    assert len(pid) == 64
    assert parts == [
        {"partial_message": "true", "partial_id": pid, "partial_ordinal": "1",
         "partial_last": "false"},
        {},
        {"partial_message": "true", "partial_id": pid, "partial_ordinal": "2",
         "partial_last": "false"},
        {"partial_message": "true", "partial_id": pid, "partial_ordinal": "3",
         "partial_last": "true"},
        {}]


async def test_reconnects_after_the_receiver_restarts() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address, "fluentd-retry-wait": "1ms"})
        await d.send([msg(b"one")])
        await rx.wait_for(1)
        await rx.stop()
        for _ in range(3):
            with pytest.raises(ReceiverDown):
                await d.send([msg(b"two")])
                await trio.sleep(0.01)
        await rx.start()
        await trio.sleep(0.01)
        await d.send([msg(b"two"), msg(b"three")])
        got = await rx.wait_for(3)
        await d.aclose()
    assert [e.record["log"] for e in got] == ["one", "two", "three"]
    assert rx.connections == 2
    assert d.dropped == 0


async def test_the_retry_wait_spaces_attempts() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address, "fluentd-retry-wait": "300ms"})
        await rx.stop()
        with pytest.raises(ReceiverDown, match="cannot connect"):
            await d.send([msg(b"a")])
        await rx.start()
        with pytest.raises(ReceiverDown, match="waiting"):
            await d.send([msg(b"a")])
        assert rx.connections == 0
        await trio.sleep(0.35)
        await d.send([msg(b"a")])
        await rx.wait_for(1)
        await d.aclose()


async def test_max_retries_gives_a_batch_up_and_counts_it() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address, "fluentd-retry-wait": "0s",
                      "fluentd-max-retries": "1"})
        await rx.stop()
        with pytest.raises(ReceiverDown):
            await d.send([msg(b"a"), msg(b"b")])
        await d.send([msg(b"a"), msg(b"b")])  # the one retry failed: given up
        assert d.dropped == 2
        await rx.start()
        await d.send([msg(b"c")])
        got = await rx.wait_for(1)
        await d.aclose()
    assert [e.record["log"] for e in got] == ["c"]


async def test_connect_fails_without_a_receiver_unless_async() -> None:
    async with fluentd_receiver() as rx:
        address = rx.address
        await rx.stop()
        d = driver(**{"fluentd-address": address})
        assert not d.async_connect
        with pytest.raises(ReceiverDown, match="cannot connect"):
            await d.connect()
        assert driver(**{"fluentd-async-connect": "true"}).async_connect


async def test_a_unix_socket_receiver() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "fluent.sock")
        async with fluentd_receiver(unix_path=path) as rx:
            d = driver(**{"fluentd-address": f"unix://{path}"})
            await d.send([msg(b"over unix")])
            got = await rx.wait_for(1)
            await d.aclose()
    assert got[0].record["log"] == "over unix"


@pytest.mark.parametrize(("raw", "address"), [
    ("", Address("127.0.0.1", 24224)),
    ("fluent", Address("fluent", 24224)),
    ("fluent:24225", Address("fluent", 24225)),
    ("tcp://fluent:1", Address("fluent", 1)),
    ("[::1]:5", Address("::1", 5)),
    ("unix:///run/fluent.sock", Address(path="/run/fluent.sock")),
])
def test_addresses(raw: str, address: Address) -> None:
    assert fluentd.parse_address(raw) == address


@pytest.mark.parametrize(("config", "message"), [
    ({"foo": "x"}, "unknown log opt 'foo' for fluentd log driver"),
    ({"gelf-address": "udp://h:1"}, "unknown log opt 'gelf-address' for fluentd log driver"),
    ({"fluentd-address": "udp://h:1"},
     "invalid fluentd-address (udp://h:1): unsupported scheme: 'udp'"),
    ({"fluentd-address": "unix://"}, "invalid fluentd-address (unix://): path is empty"),
    ({"fluentd-address": "h:99999"}, "invalid fluentd-address (h:99999): invalid port"),
    ({"fluentd-address": "tcp://h:1/x"}, "should not contain a path element"),
    ({"fluentd-retry-wait": "1"}, 'invalid fluentd-retry-wait: time: invalid duration "1"'),
    ({"fluentd-retry-wait": "-1s"}, "invalid fluentd-retry-wait: -1s is negative"),
    ({"fluentd-max-retries": "-1"},
     'invalid fluentd-max-retries: strconv.ParseUint: parsing "-1": invalid syntax'),
    ({"fluentd-max-retries": "4294967296"},
     "invalid fluentd-max-retries: value out of range"),
    ({"fluentd-async-connect": "yes"},
     'invalid fluentd-async-connect: strconv.ParseBool: parsing "yes": invalid syntax'),
    ({"fluentd-buffer-limit": "big"}, "invalid fluentd-buffer-limit: invalid size: 'big'"),
    ({"tag": "{{.Nope}}"}, "{{.Nope}}"),
    ({"mode": "fast"}, "unknown log mode: fast"),
])
def test_options_refused(config: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError) as exc:
        fluentd.validate(config)
    assert message in str(exc.value)


def test_options_accepted_and_what_they_mean() -> None:
    config = {"fluentd-address": "localhost:24224", "fluentd-tag": "x", "tag": "{{.ID}}",
              "labels": "a", "env": "b", "labels-regex": "^a", "env-regex": "^b",
              "fluentd-buffer-limit": "8m", "fluentd-retry-wait": "1m30s",
              "fluentd-max-retries": "5", "fluentd-async-connect": "1", "mode": "non-blocking"}
    fluentd.validate(config)
    assert fluentd.pump_buffer(config) == ("non-blocking", 8 << 20)
    assert fluentd.pump_buffer({**config, "max-buffer-size": "1m"})[1] == 10**6
    assert fluentd.pump_buffer({})[1] == 1 << 20
    d = driver(**config)
    assert (d.retry_wait, d.max_retries, d.async_connect) == (90.0, 5, True)
    defaults = driver()
    assert (defaults.retry_wait, defaults.max_retries, defaults.async_connect) == (
        1.0, None, False)
    assert defaults.encoder.tag == f"docker.{CID[:12]}"
    assert fluentd.parse_duration("1.5h2m.5s") == 5400 + 120 + 0.5
    assert fluentd.ram_in_bytes("1.5k") == 1536


async def test_through_the_pump_nothing_is_lost_across_a_restart() -> None:
    async with fluentd_receiver() as rx:
        d = driver(**{"fluentd-address": rx.address, "fluentd-retry-wait": "10ms"})
        pump = LogPump(d, mode="blocking", max_bytes=4096)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump.run)
            for i in range(50):
                await pump.put(msg(b"%d" % i))
            await rx.wait_for(50)
            await rx.stop()
            taken = 50
            with trio.move_on_after(0.3):  # the buffer fills, then the writer waits
                for i in range(50, 200):
                    await pump.put(msg(b"%d" % i))
                    taken += 1
            assert 50 < taken < 200
            await rx.start()
            await pump.close(timeout=10)
            nursery.cancel_scope.cancel()
    assert [e.record["log"] for e in rx.entries] == [str(i) for i in range(taken)]
    assert pump.dropped == d.dropped == 0
