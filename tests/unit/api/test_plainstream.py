"""Which POSTs the protocol may answer plainly: those whose whole body of a known length came
with the head (``svc.api.plainstream.posted``)."""

from __future__ import annotations

from svc.api.fastpath import Posted
from svc.api.plainstream import POSTED_MAX, bodiless, posted

JSON = (b"content-type", b"application/json")


def test_a_body_all_there_is_taken_and_what_follows_it_left() -> None:
    got = posted([(b"content-length", b"4"), JSON], b'{"a"}stdin')
    assert got == Posted(b'{"a"', "application/json", False)


def test_a_body_still_on_its_way_is_not() -> None:
    assert posted([(b"content-length", b"10"), JSON], b'{"a":') is None


def test_no_length_is_an_empty_body() -> None:
    assert posted([JSON], b"") == Posted(b"", "application/json", False)


def test_chunked_continue_and_large_bodies_go_the_full_way() -> None:
    assert posted([(b"transfer-encoding", b"chunked")], b"4\r\n{}{}\r\n0\r\n\r\n") is None
    assert posted([(b"content-length", b"2"), (b"expect", b"100-continue")], b"{}") is None
    big = b"x" * (POSTED_MAX + 1)
    assert posted([(b"content-length", str(len(big)).encode())], big) is None


def test_an_upgrade_is_seen() -> None:
    headers = [(b"content-length", b"2"), (b"connection", b"Upgrade"), (b"upgrade", b"tcp")]
    assert posted(headers, b"{}") == Posted(b"{}", None, True)
    assert posted(headers[:2], b"{}") == Posted(b"{}", None, False)


def test_bodiless() -> None:
    assert bodiless([(b"host", b"x"), (b"content-length", b"0")])
    assert not bodiless([(b"content-length", b"1")])
    assert not bodiless([(b"upgrade", b"tcp")])
