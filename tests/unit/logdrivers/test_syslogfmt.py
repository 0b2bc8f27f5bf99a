"""The syslog driver's bytes (svc.logdrivers.syslogfmt): each format and the framing, exactly."""

from __future__ import annotations

import datetime as dt

import pytest

from svc.logdrivers.syslogfmt import format_message, frame, local_time, octet_counted

T = 1_700_000_000_123_456_789  # 2023-11-14T22:13:20.123456789Z
PLUS1 = dt.timezone(dt.timedelta(hours=1))
MINUS0530 = dt.timezone(-dt.timedelta(hours=5, minutes=30))


def fmt(f: str, tz: dt.tzinfo, content: bytes = b"hello") -> bytes:
    return format_message(f, 30, local_time(T, tz), "host1", "abc123", 4242, content)


def test_no_format_is_srslogs_unix_formatter() -> None:
    assert fmt("", dt.UTC) == b"<30>Nov 14 22:13:20 abc123[4242]: hello\n"


def test_rfc3164_has_the_hostname_and_a_space_padded_day() -> None:
    early = 1_699_000_000 * 10**9  # 2023-11-03T08:26:40Z
    got = format_message("rfc3164", 27, local_time(early, dt.UTC), "h", "t", 1, b"x")
    assert got == b"<27>Nov  3 08:26:40 h t[1]: x\n"
    assert fmt("rfc3164", PLUS1) == b"<30>Nov 14 23:13:20 host1 abc123[4242]: hello\n"


@pytest.mark.parametrize(("tz", "stamp"), [
    (dt.UTC, "2023-11-14T22:13:20Z"), (PLUS1, "2023-11-14T23:13:20+01:00"),
    (MINUS0530, "2023-11-14T16:43:20-05:30")])
def test_rfc5424_seconds_with_the_offset_and_nil_structured_data(tz: dt.tzinfo,
                                                                 stamp: str) -> None:
    assert fmt("rfc5424", tz) == f"<30>1 {stamp} host1 abc123 4242 abc123 - hello\n".encode()


def test_rfc5424micro_has_six_zero_padded_digits() -> None:
    assert fmt("rfc5424micro", dt.UTC) == (
        b"<30>1 2023-11-14T22:13:20.123456Z host1 abc123 4242 abc123 - hello\n")
    whole = format_message("rfc5424micro", 30, local_time(1_700_000_000 * 10**9, PLUS1),
                           "h", "t", 1, b"x")
    assert whole == b"<30>1 2023-11-14T23:13:20.000000+01:00 h t 1 t - x\n"


def test_a_newline_is_added_only_when_missing() -> None:
    assert fmt("", dt.UTC, b"ends\n").endswith(b"ends\n")
    assert fmt("", dt.UTC, b"").endswith(b"]: \n")


def test_octet_counting_is_for_rfc5424_over_tls_only() -> None:
    assert octet_counted("rfc5424", "tcp+tls") and octet_counted("rfc5424micro", "tcp+tls")
    assert not octet_counted("rfc5424", "tcp") and not octet_counted("rfc5424", "udp")
    assert not octet_counted("rfc3164", "tcp+tls") and not octet_counted("", "tcp+tls")
    assert frame(b"<1>1 x\n", octet_counting=True) == b"7 <1>1 x\n"
    assert frame(b"<1>1 x\n", octet_counting=False) == b"<1>1 x\n"


def test_an_unknown_format_is_a_bug() -> None:
    with pytest.raises(ValueError, match="rfc9999"):
        fmt("rfc9999", dt.UTC)
