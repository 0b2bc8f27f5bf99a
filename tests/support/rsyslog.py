"""A private ``rsyslogd`` for the tests: UDP, TCP and TLS inputs on free 127.0.0.1 ports, a
unix stream socket (imptcp's ``path``) and a unix datagram socket (imuxsock), everything
written to one file, one JSON object a line, with the raw message and what rsyslog parsed
of it. The TLS input (rsyslog-gnutls) wants a client certificate signed by the test's CA
(``x509/certvalid``). ``stop()`` kills rsyslogd and removes its directory, whatever
happened; ``restart()`` stops it and starts it again on the same ports.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

BINARY = "/usr/sbin/rsyslogd"
GTLS = "/usr/lib/x86_64-linux-gnu/rsyslog/lmnsd_gtls.so"
FIELDS = {"input": "inputname", "raw": "rawmsg", "pri": "pri",
          "facility": "syslogfacility", "severity": "syslogseverity",
          "hostname": "hostname", "tag": "syslogtag", "app": "app-name",
          "procid": "procid", "msgid": "msgid", "sd": "structured-data", "msg": "msg",
          "version": "protocol-version"}
CONF = """global(workDirectory="{d}/work" maxMessageSize="256k"
       defaultNetstreamDriverCAFile="{d}/ca.pem"
       defaultNetstreamDriverCertFile="{d}/server.pem"
       defaultNetstreamDriverKeyFile="{d}/server.key")
module(load="imudp")
module(load="imptcp")
module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1"
       streamDriver.authMode="x509/certvalid")
module(load="imuxsock" sysSock.use="off")
template(name="svc-json" type="string" string="{template}\\n")
input(type="imudp" address="127.0.0.1" port="{udp}" name="udp")
input(type="imptcp" address="127.0.0.1" port="{tcp}" name="tcp")
input(type="imtcp" address="127.0.0.1" port="{tls}" name="tls")
input(type="imptcp" path="{d}/stream.sock" unlink="on" name="unix")
input(type="imuxsock" socket="{d}/dgram.sock" createPath="on")
*.* action(type="omfile" file="{d}/out.jsonl" template="svc-json")
"""


def _template() -> str:
    parts = [f'\\"{k}\\":\\"%{v}:::json%\\"' for k, v in FIELDS.items()]
    parts.append('\\"reported\\":\\"%timereported:::date-rfc3339,json%\\"')
    return "{" + ",".join(parts) + "}"


def free_port(kind: socket.SocketKind = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Rsyslog:
    """One rsyslogd of the test's (see the module)."""

    def __init__(self) -> None:
        if not os.path.exists(BINARY):
            pytest.skip("rsyslogd is not installed (apt-get install rsyslog rsyslog-gnutls)")
        if not os.path.exists(GTLS):
            pytest.skip("rsyslog's TLS driver is not installed (apt-get install rsyslog-gnutls)")
        self.dir = Path(tempfile.mkdtemp(prefix="svc-rsyslog-"))
        (self.dir / "work").mkdir()
        self.udp = free_port(socket.SOCK_DGRAM)
        self.tcp = free_port()
        self.tls = free_port()
        self.stream_sock = str(self.dir / "stream.sock")
        self.dgram_sock = str(self.dir / "dgram.sock")
        self.out = self.dir / "out.jsonl"
        self.ca = trustme.CA()
        self.ca.cert_pem.write_to_path(str(self.dir / "ca.pem"))
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        server.private_key_pem.write_to_path(str(self.dir / "server.key"))
        server.cert_chain_pems[0].write_to_path(str(self.dir / "server.pem"))
        client = self.ca.issue_cert("client.test")
        client.private_key_pem.write_to_path(str(self.dir / "client.key"))
        client.cert_chain_pems[0].write_to_path(str(self.dir / "client.pem"))
        (self.dir / "rsyslog.conf").write_text(CONF.format(
            d=self.dir, udp=self.udp, tcp=self.tcp, tls=self.tls, template=_template()))
        self.proc: subprocess.Popen[bytes] | None = None

    def path(self, name: str) -> str:
        """A file of the test's: ``ca.pem``, ``client.pem``, ``client.key``..."""
        return str(self.dir / name)

    def start(self) -> None:
        """Start rsyslogd in the foreground and wait for every input; skip the test with
        rsyslogd's words if it cannot run here."""
        with open(self.dir / "rsyslogd.log", "ab") as log:
            self.proc = subprocess.Popen(
                [BINARY, "-n", "-f", str(self.dir / "rsyslog.conf"),
                 "-i", str(self.dir / "rsyslogd.pid")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                out = (self.dir / "rsyslogd.log").read_text(errors="replace")
                self.stop_process()
                pytest.skip(f"rsyslogd cannot run here: {out.strip()[-2000:]}")
            time.sleep(0.05)

    def _ready(self) -> bool:
        for port in (self.tcp, self.tls):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                return False
        return os.path.exists(self.stream_sock) and os.path.exists(self.dgram_sock)

    def stop_process(self) -> None:
        """Kill rsyslogd (what it had not written is lost, as with a crash)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop_process()
        self.start()

    def stop(self) -> None:
        try:
            self.stop_process()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def records(self) -> list[dict[str, Any]]:
        """What rsyslog wrote so far, one dict a message."""
        if not self.out.exists():
            return []
        return [json.loads(line) for line in self.out.read_text().splitlines() if line]

    def wait_records(self, count: int, *, contains: str = "",
                     timeout: float = 10) -> list[dict[str, Any]]:
        """The records whose raw message contains ``contains``, once there are ``count``."""
        deadline = time.monotonic() + timeout
        while True:
            got = [r for r in self.records() if contains in r["raw"]]
            if len(got) >= count or time.monotonic() > deadline:
                return got
            time.sleep(0.05)

    async def await_records(self, count: int, *, contains: str = "",
                            timeout: float = 10) -> list[dict[str, Any]]:
        """``wait_records`` for a trio test whose own tasks must run meanwhile."""
        with trio.move_on_after(timeout):
            while len(got := [r for r in self.records() if contains in r["raw"]]) < count:
                await trio.sleep(0.05)
        return got


@contextlib.contextmanager
def rsyslog() -> Iterator[Rsyslog]:
    """A started private rsyslogd, killed and removed on the way out."""
    server = Rsyslog()
    try:
        server.start()
        yield server
    finally:
        server.stop()
