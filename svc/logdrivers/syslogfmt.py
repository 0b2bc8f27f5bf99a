"""What the ``syslog`` driver puts on the wire, as bytes (sans-IO): the message formats of
the ``syslog-format`` option and the framing of stream transports, as moby's
``daemon/logger/syslog/syslog.go`` and its vendored ``RackSec/srslog`` (``formatter.go``,
``framer.go``, ``writer.go``) produced them; read for facts.

Every message's content ends with a newline (srslog's ``write`` adds one when missing), so on
a stream transport without octet counting the messages are newline-delimited (RFC 6587's
non-transparent framing). The formats, with PRI = facility | severity:

* ``""`` (no ``syslog-format``; srslog ``UnixFormatter``): ``<PRI>Mmm _d hh:mm:ss TAG[PID]: MSG``
  (Go's ``time.Stamp``: no year, no hostname, the day padded with a space);
* ``rfc3164``: ``<PRI>Mmm _d hh:mm:ss HOSTNAME TAG[PID]: MSG``; srslog of v1.11 and v1.12 put a
  space after ``<PRI>``, which RFC 3164 does not have and the srslog of v1.13 dropped;
* ``rfc5424``: ``<PRI>1 TIMESTAMP HOSTNAME TAG PID TAG - MSG``, TIMESTAMP in RFC 3339 with
  seconds and the local offset ("Z" at UTC, as Go's ``time.RFC3339``); APP-NAME and MSGID are
  both the tag ("rsyslog uses appname ... to fill in %syslogtag%", syslog.go); STRUCTURED-DATA
  is the NILVALUE "-", which v1.11 to v17.03 left out (moby b7d802bb, "Add NILVALUE for
  STRUCTURED-DATA");
* ``rfc5424micro``: the same with a six-digit fraction, zero-padded as v19.03 has it
  (moby fa6dabf8; v1.12 trimmed trailing zeros).

PID is the daemon's (``os.Getpid()`` in moby), HOSTNAME the host's (``os.Hostname()``). The
timestamp is when the daemon read the line (moby formatted ``time.Now()`` at send time).
Octet counting (RFC 5425 / RFC 6587 3.4.1: ``LEN SP MSG``, LEN counting the final newline)
frames the rfc5424 formats over ``tcp+tls`` only, as v1.13 fixed it (v1.11 and v1.12 also
octet-counted them over udp and tcp).
"""

from __future__ import annotations

import datetime as dt

FORMATS = ("", "rfc3164", "rfc5424", "rfc5424micro")
SEVERITY_ERR = 3
SEVERITY_INFO = 6
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun",
           "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def local_time(time_ns: int, tz: dt.tzinfo | None = None) -> dt.datetime:
    """``time_ns`` in ``tz`` (None: the host's local zone, as Go's ``time.Now()``)."""
    secs, nanos = divmod(time_ns, 1_000_000_000)
    when = dt.datetime.fromtimestamp(secs, dt.UTC).astimezone(tz)
    return when.replace(microsecond=nanos // 1000)


def stamp_3164(when: dt.datetime) -> str:
    """Go's ``time.Stamp``: ``Jan _2 15:04:05``."""
    return f"{_MONTHS[when.month - 1]} {when.day:2d} {when:%H:%M:%S}"


def stamp_rfc3339(when: dt.datetime, *, micro: bool = False) -> str:
    """Go's ``time.RFC3339`` (or with ``.000000`` micro digits): the offset as ``Z`` at
    UTC, else ``+hh:mm``."""
    base = f"{when:%Y-%m-%dT%H:%M:%S}"
    if micro:
        base += f".{when.microsecond:06d}"
    offset = when.utcoffset() or dt.timedelta(0)
    if not offset:
        return base + "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    return f"{base}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def format_message(fmt: str, priority: int, when: dt.datetime, hostname: str, tag: str,
                   pid: int, content: bytes) -> bytes:
    """One message in format ``fmt`` (one of ``FORMATS``), content newline-terminated."""
    if not content.endswith(b"\n"):
        content += b"\n"
    if fmt == "":
        head = f"<{priority}>{stamp_3164(when)} {tag}[{pid}]: "
    elif fmt == "rfc3164":
        head = f"<{priority}>{stamp_3164(when)} {hostname} {tag}[{pid}]: "
    elif fmt in ("rfc5424", "rfc5424micro"):
        stamp = stamp_rfc3339(when, micro=fmt == "rfc5424micro")
        head = f"<{priority}>1 {stamp} {hostname} {tag} {pid} {tag} - "
    else:
        raise ValueError(f"unknown syslog format {fmt!r}")
    return head.encode() + content


def octet_counted(fmt: str, proto: str) -> bool:
    """Whether messages of ``fmt`` over ``proto`` are framed by octet counting."""
    return fmt.startswith("rfc5424") and proto == "tcp+tls"


def frame(message: bytes, *, octet_counting: bool) -> bytes:
    """``message`` framed for a stream: ``LEN SP MSG``, or as it is (newline-ended)."""
    return b"%d %s" % (len(message), message) if octet_counting else message
