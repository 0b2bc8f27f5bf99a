"""svcd as a process: sockets and their permissions, pid file, config file, TCP and TLS,
CORS, and clean shutdown on SIGTERM/SIGINT."""

from __future__ import annotations

import contextlib
import grp
import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests.conftest import docker_cli, http_client
from tests.support.daemon import REPO, Daemon
from tests.support.http import connect, read_head


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def svcd(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """Run svcd in the foreground (for start-up failures)."""
    return subprocess.run([sys.executable, "-m", "svc", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def temp_group() -> Iterator[str]:
    name = "svct" + uuid.uuid4().hex[:8]
    subprocess.run(["groupadd", "--system", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["groupdel", name], check=False)


def test_unix_socket_mode_and_group(spawn) -> None:  # type: ignore[no-untyped-def]
    with temp_group() as group:
        d = spawn(["--group", group])
        st = d.sock.stat()
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o660
        assert st.st_uid == 0 and st.st_gid == grp.getgrnam(group).gr_gid
        d.stop()
    d2 = spawn(["--group", "svct-no-such-group"])
    st = d2.sock.stat()
    assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == 0


def test_stale_socket_is_replaced_live_one_is_refused(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    d.kill()  # SIGKILL: the socket file stays behind
    assert d.sock.exists() and not d.ping()
    d.start()  # the stale socket is replaced
    assert d.ping()
    other = Daemon(workdir=None)
    try:
        other.hosts = [d.url]
        other.start(wait=False)
        assert other.wait() == 1
        assert "is in use by a running daemon" in other.log()
        assert d.ping()  # the live daemon keeps its socket
    finally:
        other.cleanup()


def test_pidfile_written_and_a_second_daemon_refused(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    assert d.pidfile.read_text() == str(d.proc.pid)
    second = Daemon(workdir=None)
    try:
        second.pidfile = d.pidfile
        second.start(wait=False)
        assert second.wait() == 1
        assert "pid file found" in second.log()
    finally:
        second.cleanup()
    assert d.stop() == 0
    assert not d.pidfile.exists() and not d.sock.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_shutdown_ends_streams_and_removes_socket(spawn, sig: int) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    s = await connect(d.sock)
    await s.send_all(b"GET /events HTTP/1.1\r\nHost: svc\r\n\r\n")
    buf = bytearray()
    await read_head(s, buf)
    idle = await connect(d.sock)  # an idle keep-alive connection
    t0 = trio.current_time()
    d.signal(sig)
    with trio.fail_after(10):
        while not bytes(buf).endswith(b"0\r\n\r\n"):
            data = await s.receive_some()
            if not data:
                break
            buf += data
        code = await trio.to_thread.run_sync(d.wait)
    assert code == 0, d.log()
    assert trio.current_time() - t0 < 4  # streams end at once, not after the graceful timeout
    assert b"shutting down" in bytes(buf)  # the stream's final error says why it ended
    assert not d.sock.exists() and not d.pidfile.exists()
    assert await idle.receive_some() == b""
    assert "shutting down" in d.log()


def test_config_file_keys(tmp_path: Path) -> None:
    d = Daemon(workdir=None)
    try:
        cfg = d.dir / "daemon.json"
        cfg.write_text(json.dumps({"hosts": [d.url], "data-root": str(d.root),
                                   "exec-root": str(d.exec_root), "pidfile": str(d.pidfile),
                                   "log-level": "debug", "api-cors-header": "*",
                                   "bridge": d.bridge, "bip": d.bip}))
        d.hosts = []
        d.command = lambda: [sys.executable, "-m", "svc", "--config-file", str(cfg)]  # type: ignore[method-assign]
        d.start()
        assert d.pidfile.exists() and d.root.is_dir()
        assert "DEBUG" in d.log()
        resp = subprocess.run(["curl", "-si", "--unix-socket", str(d.sock), "http://svc/_ping"],
                              capture_output=True, text=True, timeout=10).stdout
        assert "access-control-allow-origin: *" in resp.lower()
    finally:
        d.cleanup()


def test_config_file_errors(tmp_path: Path) -> None:
    cfg = tmp_path / "daemon.json"
    cfg.write_text(json.dumps({"log-level": "debug"}))
    both = svcd("--config-file", str(cfg), "--log-level", "info")
    assert both.returncode == 2 and "both as a flag and in the configuration file" in both.stderr
    assert "log-level" in both.stderr
    cfg.write_text(json.dumps({"log-levl": "debug"}))
    unknown = svcd("--config-file", str(cfg))
    assert unknown.returncode == 2 and "unknown directive 'log-levl'" in unknown.stderr
    cfg.write_text("{not json")
    assert "not valid JSON" in svcd("--config-file", str(cfg)).stderr
    missing = svcd("--config-file", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    bad_level = svcd("--config-file", str(cfg.with_name("x.json")), "--log-level", "loud")
    assert bad_level.returncode == 2


def test_plain_tcp_is_refused_unless_asked_for() -> None:
    port = free_port()
    d = Daemon(workdir=None)
    try:
        d.hosts = [d.url, f"tcp://127.0.0.1:{port}"]
        d.start(wait=False)
        assert d.wait() == 1
        assert "refusing to listen on tcp://127.0.0.1" in d.log()
        assert "--tls=false" in d.log()
        assert not d.sock.exists()  # nothing stays bound
    finally:
        d.cleanup()
    d2 = Daemon(["--tls=false"])
    try:
        d2.hosts = [d2.url, f"tcp://127.0.0.1:{port}"]
        d2.start()
        assert "WITHOUT TLS" in d2.log()
        out = docker_cli(f"tcp://127.0.0.1:{port}", "version", "--format", "{{.Server.APIVersion}}")
        assert out.stdout.strip() == "1.23", out.stderr
    finally:
        d2.cleanup()


@pytest.fixture
def certs(tmp_path: Path) -> dict[str, Path]:
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("svc-test-client")
    out = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "server-cert.pem",
           "key": tmp_path / "server-key.pem", "ccert": tmp_path / "cert.pem",
           "ckey": tmp_path / "key.pem"}
    ca.cert_pem.write_to_path(out["ca"])
    server.cert_chain_pems[0].write_to_path(out["cert"])
    server.private_key_pem.write_to_path(out["key"])
    client.cert_chain_pems[0].write_to_path(out["ccert"])
    client.private_key_pem.write_to_path(out["ckey"])
    other = trustme.CA().issue_cert("intruder")
    out["other_cert"] = tmp_path / "other-cert.pem"
    out["other_key"] = tmp_path / "other-key.pem"
    other.cert_chain_pems[0].write_to_path(out["other_cert"])
    other.private_key_pem.write_to_path(out["other_key"])
    return out


@contextlib.contextmanager
def tls_daemon(certs: dict[str, Path]) -> Iterator[tuple[Daemon, int]]:
    """A daemon on its unix socket and on a --tlsverify TCP port; removed afterwards."""
    port = free_port()
    d = Daemon(["--tlsverify", "--tlscacert", str(certs["ca"]), "--tlscert", str(certs["cert"]),
                "--tlskey", str(certs["key"])])
    try:
        d.hosts = [d.url, f"tcp://127.0.0.1:{port}"]
        d.start()
        yield d, port
    finally:
        d.cleanup()


def test_tlsverify_with_the_real_cli(certs: dict[str, Path]) -> None:
    with tls_daemon(certs) as (d, port):
        host = f"tcp://127.0.0.1:{port}"
        ok = docker_cli(host, "--tlsverify", "--tlscacert", str(certs["ca"]), "--tlscert",
                        str(certs["ccert"]), "--tlskey", str(certs["ckey"]), "version",
                        "--format", "{{.Server.APIVersion}}")
        assert ok.returncode == 0 and ok.stdout.strip() == "1.23", ok.stderr
        # DOCKER_TLS_VERIFY/DOCKER_CERT_PATH, the way users usually configure it
        ok2 = docker_cli(host, "info", "--format", "{{.Driver}}", extra_env={
            "DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(certs["ca"].parent)})
        assert ok2.stdout.strip() == "overlay2", ok2.stderr

        # a client without a certificate is refused during the handshake
        ctx = ssl.create_default_context(cafile=str(certs["ca"]))
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /_ping HTTP/1.1\r\nHost: svc\r\n\r\n")
                if not tls.recv(1024):
                    raise ConnectionResetError("closed without an answer")
        nocert = docker_cli(host, "--tlsverify", "--tlscacert", str(certs["ca"]), "version")
        assert nocert.returncode != 0
        assert "Server:" not in nocert.stdout
        # a certificate from another CA is refused too
        bad = docker_cli(host, "--tlsverify", "--tlscacert", str(certs["ca"]), "--tlscert",
                         str(certs["other_cert"]), "--tlskey", str(certs["other_key"]), "version")
        assert bad.returncode != 0
        # plain HTTP on the TLS port gets nothing useful
        plain = docker_cli(host, "version")
        assert plain.returncode != 0
        assert d.ping()  # the unix socket is unaffected


def test_tls_without_verify_accepts_clients_without_certs(certs: dict[str, Path]) -> None:
    port = free_port()
    d = Daemon(["--tls", "--tlscert", str(certs["cert"]), "--tlskey", str(certs["key"])])
    try:
        d.hosts = [d.url, f"tcp://127.0.0.1:{port}"]
        d.start()
        out = docker_cli(f"tcp://127.0.0.1:{port}", "--tlsverify", "--tlscacert",
                         str(certs["ca"]), "version", "--format", "{{.Server.APIVersion}}")
        assert out.stdout.strip() == "1.23", out.stderr
    finally:
        d.cleanup()


def test_tls_missing_files_fail_clearly(tmp_path: Path) -> None:
    (tmp_path / "none.json").write_text("{}")
    out = svcd("-H", f"tcp://127.0.0.1:{free_port()}", "--tlsverify", "--tlscacert",
               str(tmp_path / "ca.pem"), "--tlscert", str(tmp_path / "c.pem"), "--tlskey",
               str(tmp_path / "k.pem"), "--root", str(tmp_path / "r"), "--pidfile",
               str(tmp_path / "pid"), "--config-file", str(tmp_path / "none.json"))
    assert out.returncode == 1
    assert "--tlscert: cannot read" in out.stderr
    assert not (tmp_path / "pid").exists()


async def test_cors_header_and_preflight(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn(["--api-cors-header", "https://ui.example"])
    async with http_client(d.sock) as c:
        r = await c.get("/version")
        assert r.headers["access-control-allow-origin"] == "https://ui.example"
        assert "X-Registry-Auth" in r.headers["access-control-allow-headers"]
        pre = await c.options("/v1.23/containers/json")
        assert pre.status_code == 200
        assert "POST" in pre.headers["access-control-allow-methods"]


async def test_no_cors_by_default(client) -> None:  # type: ignore[no-untyped-def]
    r = await client.get("/version")
    assert "access-control-allow-origin" not in r.headers
    assert (await client.options("/version")).status_code == 404


def test_svcd_version_flag() -> None:
    out = svcd("--version")
    assert out.returncode == 0 and "API 1.23" in out.stdout


def test_installed_console_script() -> None:
    exe = Path(sys.executable).parent / "svcd"
    assert exe.exists(), "svcd must be a console script of the package"
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0
    for flag in ("--host", "--tlsverify", "--root", "--exec-root", "--runtime",
                 "--api-cors-header", "--log-level", "--pidfile", "--config-file"):
        assert flag in out.stdout
    assert os.access(exe, os.X_OK)


def test_two_daemons_cannot_share_a_root(spawn) -> None:  # type: ignore[no-untyped-def]
    d = spawn()
    other = Daemon(workdir=None)
    try:
        other.root = d.root
        other.start(wait=False)
        assert other.wait() == 1
        assert f"another svcd is already using {d.root}" in other.log()
        assert not other.sock.exists()
    finally:
        other.cleanup()
    assert d.ping()


def test_bad_host_touches_nothing(tmp_path: Path) -> None:
    (tmp_path / "none.json").write_text("{}")
    out = svcd("-H", "udp://1.2.3.4:5", "--root", str(tmp_path / "root"), "--pidfile",
               str(tmp_path / "pid"), "--config-file", str(tmp_path / "none.json"))
    assert out.returncode == 1 and "invalid host 'udp://1.2.3.4:5'" in out.stderr
    assert not (tmp_path / "root").exists() and not (tmp_path / "pid").exists()


def test_save_and_load_over_tls(certs: dict[str, Path], tmp_path: Path) -> None:
    """Save streams through the TLS layer (it cannot take the socket over directly)."""
    from tests.support import images as timg

    with tls_daemon(certs) as (_d, port):
        tls = ["--tlsverify", "--tlscacert", str(certs["ca"]), "--tlscert", str(certs["ccert"]),
               "--tlskey", str(certs["ckey"])]
        host = f"tcp://127.0.0.1:{port}"
        arc = tmp_path / "in.tar"
        img = timg.SaveImage([timg.layer_tar([timg.file("f", b"x" * 300_000)])],
                             repo_tags=["tls:1"])
        arc.write_bytes(timg.docker_save_tar([img]))
        assert docker_cli(host, *tls, "load", "-i", str(arc)).returncode == 0
        out = tmp_path / "out.tar"
        r = docker_cli(host, *tls, "save", "-o", str(out), "tls:1")
        assert r.returncode == 0, r.stderr
        with tarfile.open(out) as t:
            manifest = json.loads(t.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert manifest[0]["RepoTags"] == ["tls:1"]
