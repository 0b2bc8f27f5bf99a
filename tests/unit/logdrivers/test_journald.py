"""The journald driver against a real, private systemd-journald (tests.support.journald):
every field as the journal recorded it, the binary-safe form, the memfd fallback, a journal
that goes away and comes back; and its options."""

from __future__ import annotations

import os
import secrets
import struct
import time
from collections.abc import Iterator

import pytest

from svc.logdrivers import journald
from svc.logdrivers.base import Info, Message, OptionError, ReceiverDown
from tests.support.journald import PrivateJournald, private_journald

IID = "sha256:" + "fedcba987654" + "0" * 52


def info(cid: str | None = None, **config: str) -> Info:
    return Info(config=config, container_id=cid or secrets.token_hex(32),
                container_name="/web-1", image_id=IID, image_name="busybox:latest",
                created_ns=0, env=["HTTP_PROXY=http://p:3128", "lang.v=C", "OTHER=x"],
                labels={"com.example.team": "core", "_tier-x": "front", "other": "y"})


def msg(line: bytes, source: str = "stdout", partial: bool = False,
        time_ns: int | None = None) -> Message:
    return Message(line=line, source=source, time_ns=time_ns or time.time_ns(),
                   partial=partial)


@pytest.fixture(scope="module")
def journal() -> Iterator[PrivateJournald]:
    with private_journald() as j:
        yield j


# options


def test_unknown_options_are_refused_with_the_engines_words() -> None:
    with pytest.raises(OptionError, match="unknown log opt 'syslog-address' for journald"):
        journald.validate({"syslog-address": "udp://x"})
    journald.validate({"labels": "a", "env": "B", "labels-regex": "^a", "env-regex": "B",
                       "tag": "{{.Name}}", "mode": "non-blocking", "max-buffer-size": "4m"})


@pytest.mark.parametrize(("config", "word"), [
    ({"tag": "{{.Nope}}"}, "tag"), ({"mode": "fast"}, "mode"),
    ({"max-buffer-size": "lots"}, "max-buffer-size"), ({"env-regex": "("}, "env-regex")])
def test_malformed_values_are_refused_naming_the_option(config: dict[str, str],
                                                        word: str) -> None:
    with pytest.raises(OptionError, match=word):
        journald.validate(config)


# the native protocol, as bytes


def test_a_value_with_a_newline_goes_in_the_binary_safe_form() -> None:
    assert journald.encode_field("MESSAGE", b"plain") == b"MESSAGE=plain\n"
    assert journald.encode_field("MESSAGE", b"a\nb") == (
        b"MESSAGE\n" + struct.pack("<Q", 3) + b"a\nb\n")


def test_keys_are_sanitized_as_moby_did_from_v1_13() -> None:
    assert journald.sanitize_key("com.example.team") == "COM_EXAMPLE_TEAM"
    assert journald.sanitize_key("_tier-x") == "TIER_X"
    assert journald.sanitize_key("lang.v") == "LANG_V"
    assert journald.sanitize_key("ümlaut9") == "MLAUT9"


# against the real journal


async def test_every_field_as_the_journal_recorded_it(journal: PrivateJournald) -> None:
    i = info(labels="com.example.team,_tier-x", env="HTTP_PROXY,lang.v")
    drv = journald.create(i, socket_path=journal.socket)
    t0 = 1_700_000_000_123_456_789
    await drv.send([msg(b"hello out", time_ns=t0), msg(b"oops err", "stderr"),
                    msg(b"a piece", partial=True)])
    await drv.aclose()
    got = journal.wait_entries(3, f"CONTAINER_ID_FULL={i.full_id}")
    assert [e["MESSAGE"] for e in got] == ["hello out", "oops err", "a piece"]
    assert [e["PRIORITY"] for e in got] == ["6", "3", "6"]
    for e in got:
        assert e["CONTAINER_ID"] == i.full_id[:12]
        assert e["CONTAINER_ID_FULL"] == i.full_id
        assert e["CONTAINER_NAME"] == "web-1"
        assert e["CONTAINER_TAG"] == i.full_id[:12]  # the default tag, {{.ID}}
        assert e["SYSLOG_IDENTIFIER"] == i.full_id[:12]
        assert e["COM_EXAMPLE_TEAM"] == "core"
        assert e["TIER_X"] == "front"
        assert e["HTTP_PROXY"] == "http://p:3128"
        assert e["LANG_V"] == "C"
        assert "OTHER" not in e
        assert e["_TRANSPORT"] == "journal"
    assert got[0]["SYSLOG_TIMESTAMP"] == "2023-11-14T22:13:20.123456789Z"
    assert [e.get("CONTAINER_PARTIAL_MESSAGE") for e in got] == [None, None, "true"]


async def test_the_tag_option_names_both_tag_fields(journal: PrivateJournald) -> None:
    i = info(tag="{{.ImageName}}/{{.Name}}")
    drv = journald.create(i, socket_path=journal.socket)
    await drv.send([msg(b"x")])
    [e] = journal.wait_entries(1, f"CONTAINER_ID_FULL={i.full_id}")
    assert e["CONTAINER_TAG"] == e["SYSLOG_IDENTIFIER"] == "busybox:latest/web-1"


async def test_newlines_and_binary_arrive_byte_for_byte(journal: PrivateJournald) -> None:
    i = info()
    drv = journald.create(i, socket_path=journal.socket)
    odd = b"two\nlines\x00and \xff\xfe bytes"
    await drv.send([msg(b"line\nbreak"), msg(odd), msg(b"")])
    got = journal.wait_entries(3, f"CONTAINER_ID_FULL={i.full_id}")
    assert got[0]["MESSAGE"] == "line\nbreak"
    assert bytes(got[1]["MESSAGE"]) == odd  # journalctl prints non-UTF-8 as byte values
    assert got[2]["MESSAGE"] == ""


async def test_an_entry_too_large_for_a_datagram_goes_as_a_sealed_memfd(
        journal: PrivateJournald) -> None:
    i = info()
    drv = journald.JournaldDriver(i, socket_path=journal.socket)
    big = os.urandom(200_000).hex().encode()  # 400 kB: over the socket's send buffer
    await drv.send([msg(b"before"), msg(big), msg(b"after")])
    assert drv.memfd_sends == 1
    got = journal.wait_entries(3, f"CONTAINER_ID_FULL={i.full_id}")
    assert [e["MESSAGE"] for e in got] == ["before", big.decode(), "after"]
    assert got[1]["CONTAINER_ID"] == i.full_id[:12]


async def test_a_journal_that_goes_away_is_reported_and_reached_again() -> None:
    with private_journald() as journal:
        i = info()
        drv = journald.create(i, socket_path=journal.socket)
        await drv.send([msg(b"one")])
        journal.stop_process()
        with pytest.raises(ReceiverDown, match="journal at"):
            await drv.send([msg(b"two")])
        journal.start()
        await drv.send([msg(b"two"), msg(b"three")])
        got = journal.wait_entries(3, f"CONTAINER_ID_FULL={i.full_id}")
        assert [e["MESSAGE"] for e in got] == ["one", "two", "three"]


async def test_no_journal_at_all_is_receiver_down(tmp_path: os.PathLike[str]) -> None:
    drv = journald.create(info(), socket_path=os.path.join(tmp_path, "absent"))
    with pytest.raises(ReceiverDown, match="No such file"):
        await drv.send([msg(b"x")])
    await drv.aclose()
