"""Which POSTs the protocol keeps for their plain form until their body has come: those with
a body of a known length within ``POSTED_MAX`` (``svc.api.plainstream.post_head``)."""

from __future__ import annotations

from svc.api.fastpath import Posted
from svc.api.plainstream import POSTED_MAX, bodiless, post_head

JSON = (b"content-type", b"application/json")


def test_a_body_of_known_length_is_kept_for() -> None:
    assert post_head([(b"content-length", b"4"), JSON]) == \
        Posted(b"", "application/json", False)
    assert post_head([JSON]) == Posted(b"", "application/json", False)  # (no body)
    assert post_head([(b"content-length", str(POSTED_MAX).encode())]) is not None


def test_chunked_continue_and_large_bodies_go_the_full_way() -> None:
    assert post_head([(b"transfer-encoding", b"chunked")]) is None
    assert post_head([(b"content-length", b"2"), (b"expect", b"100-continue")]) is None
    assert post_head([(b"content-length", str(POSTED_MAX + 1).encode())]) is None


def test_an_upgrade_is_seen() -> None:
    headers = [(b"content-length", b"2"), (b"connection", b"Upgrade"), (b"upgrade", b"tcp")]
    assert post_head(headers) == Posted(b"", None, True)
    assert post_head(headers[:2]) == Posted(b"", None, False)


def test_bodiless() -> None:
    assert bodiless([(b"host", b"x"), (b"content-length", b"0")])
    assert not bodiless([(b"content-length", b"1")])
    assert not bodiless([(b"upgrade", b"tcp")])
