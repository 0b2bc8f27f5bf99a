"""Authorization plugins end to end: a daemon with ``--tlsverify`` on TCP, two users by their
client certificates, and an authz plugin (a real process, ``tests/support/plugins/authz.py``)
that denies ``docker rm`` to mallory. Through the docker CLI 28, the SDK 7.0.0 and docker-py
1.10.6 as their users call them; then what the plugin was sent."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.conftest import _docker_config_dir, run_sdk
from tests.registry.registryd import Registry
from tests.support.daemon import Daemon, import_busybox
from tests.support.etcdd import free_port
from tests.support.plugins.process import PluginProcess

USERS = ("alice", "mallory")
DENY_RM = [{"phase": "req", "user": "mallory", "method": "DELETE",
            "uri": r"^(/v[0-9.]+)?/containers/[^/?]+(\?|$)",
            "msg": "mallory may not remove containers"}]
DENIED = "authorization denied by plugin authz: mallory may not remove containers"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, the daemon's certificate for 127.0.0.1, and one client certificate per user
    (its Subject CommonName is the user's name)."""
    tmp = tmp_path_factory.mktemp("authz-certs")
    ca = trustme.CA()
    out = {"ca": tmp / "ca.pem", "cert": tmp / "server-cert.pem", "key": tmp / "server-key.pem"}
    ca.cert_pem.write_to_path(out["ca"])
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(out["cert"])
    server.private_key_pem.write_to_path(out["key"])
    for user in USERS:
        leaf = ca.issue_cert(f"{user}@example.com", common_name=user)
        out[f"{user}-cert"], out[f"{user}-key"] = tmp / f"{user}-cert.pem", tmp / f"{user}-key.pem"
        leaf.cert_chain_pems[0].write_to_path(out[f"{user}-cert"])
        leaf.private_key_pem.write_to_path(out[f"{user}-key"])
    return out


class Setup:
    """The TLS daemon, its TCP port, and its plugin."""

    def __init__(self, daemon: Daemon, port: int, plugin: PluginProcess,
                 certs: dict[str, Path]) -> None:
        self.daemon, self.port, self.plugin, self.certs = daemon, port, plugin, certs
        self.host = f"tcp://127.0.0.1:{port}"

    def cli(self, user: str, *args: str, stdin: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The docker CLI as ``user`` (her client certificate), over TLS."""
        docker = shutil.which("docker")
        if docker is None:
            pytest.skip("the docker CLI is not installed on this machine")
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        env["DOCKER_CONFIG"] = str(_docker_config_dir())
        tls = ["--tlsverify", "--tlscacert", str(self.certs["ca"]),
               "--tlscert", str(self.certs[f"{user}-cert"]),
               "--tlskey", str(self.certs[f"{user}-key"])]
        return subprocess.run([docker, "-H", self.host, *tls, *args], capture_output=True,
                              text=True, timeout=timeout, env=env,
                              input=stdin, stdin=None if stdin is not None
                              else subprocess.DEVNULL)

    def local(self) -> httpx.Client:
        """The daemon's unix socket: no certificate, so no user."""
        return httpx.Client(transport=httpx.HTTPTransport(uds=str(self.daemon.sock)),
                            base_url="http://svc", timeout=60)

    def sdk_args(self, user: str) -> list[str]:
        return [str(self.port), str(self.certs["ca"]), str(self.certs[f"{user}-cert"]),
                str(self.certs[f"{user}-key"])]


@pytest.fixture(scope="module")
def setup(certs: dict[str, Path]) -> Iterator[Setup]:
    port = free_port()
    d = Daemon(["--tlsverify", "--tlscacert", str(certs["ca"]), "--tlscert",
                str(certs["cert"]), "--tlskey", str(certs["key"]),
                "--authorization-plugin", "authz"])
    d.hosts = [d.url, f"tcp://127.0.0.1:{port}"]
    # the plugin first: the daemon's own readiness ping is authorized too
    plugin = PluginProcess("authz", "authz", socket_dir=d.plugin_dir,
                           args={"rules": json.dumps(DENY_RM)})
    try:
        plugin.start()
        d.start()
        import_busybox(d)
        yield Setup(d, port, plugin, certs)
        assert not d.forked_without_exec(), d.log()
    finally:
        d.cleanup()
        plugin.stop()


def calls_for(plugin: PluginProcess, method: str, uri_part: str,
              phase: str = "AuthZPlugin.AuthZReq") -> list[dict[str, Any]]:
    return [c["body"] for c in plugin.calls(phase)
            if c["body"]["RequestMethod"] == method and uri_part in c["body"]["RequestUri"]]


def body_of(doc: dict[str, Any], key: str = "RequestBody") -> Any:
    return json.loads(base64.b64decode(doc[key]))


# -- the docker CLI -------------------------------------------------------------------------

def test_the_cli_alice_removes_mallory_is_denied_rm_and_nothing_else(setup: Setup) -> None:
    s = setup
    made = s.cli("alice", "create", "--name", "authz-a1", "busybox", "true")
    assert made.returncode == 0, made.stderr
    rm = s.cli("alice", "rm", "authz-a1")
    assert rm.returncode == 0 and rm.stdout.strip() == "authz-a1", rm.stderr

    made = s.cli("mallory", "create", "--name", "authz-m1", "busybox", "true")
    assert made.returncode == 0, made.stderr
    rm = s.cli("mallory", "rm", "authz-m1")
    assert rm.returncode == 1
    assert f"Error response from daemon: {DENIED}" in rm.stderr, rm.stderr
    assert s.cli("mallory", "inspect", "authz-m1").returncode == 0  # still there

    # run with stdin attached (a hijacked attach), exec, logs -f, events: all allowed
    ran = s.cli("mallory", "run", "-i", "--name", "authz-m2", "busybox", "sh", "-c",
                "read x; echo got-$x", stdin="hello\n")
    assert ran.returncode == 0 and ran.stdout.strip() == "got-hello", ran.stderr
    up = s.cli("mallory", "run", "-d", "--name", "authz-m3", "busybox", "sleep", "30")
    assert up.returncode == 0, up.stderr
    ex = s.cli("mallory", "exec", "authz-m3", "echo", "from-exec")
    assert ex.returncode == 0 and ex.stdout.strip() == "from-exec", ex.stderr
    ex = s.cli("mallory", "exec", "-i", "authz-m3", "cat", stdin="piped\n")
    assert ex.stdout.strip() == "piped", ex.stderr
    up = s.cli("mallory", "run", "-d", "-i", "--name", "authz-m5", "busybox", "sh", "-c",
               "read x; echo attached-$x")
    assert up.returncode == 0, up.stderr
    at = s.cli("mallory", "attach", "authz-m5", stdin="in\n", timeout=20)
    assert at.stdout.strip() == "attached-in", (at.stdout, at.stderr)
    lf = s.cli("mallory", "run", "-d", "--name", "authz-m4", "busybox", "sh", "-c",
               "echo one; sleep 1; echo two")
    assert lf.returncode == 0, lf.stderr
    logs = s.cli("mallory", "logs", "-f", "authz-m4")
    assert logs.stdout.split() == ["one", "two"], logs.stderr
    since = str(int(time.time()) - 120)
    ev = s.cli("mallory", "events", "--since", since, "--until", str(int(time.time()) + 1),
               "--filter", "container=authz-m1")
    assert "create" in ev.stdout, ev.stderr
    st = s.cli("mallory", "stats", "--no-stream", "authz-m3")
    assert st.returncode == 0 and "authz-m3" in st.stdout, st.stderr
    cp = s.cli("mallory", "cp", "authz-m3:/etc/hostname", "-")  # an archive
    assert cp.returncode == 0 and cp.stdout, cp.stderr
    s.cli("mallory", "kill", "authz-m3")
    info = s.cli("mallory", "info", "--format", "{{json .Plugins.Authorization}}")
    assert json.loads(info.stdout) == ["authz"], info.stderr

    # what the plugin was told about mallory's rm, and about alice's
    denied = calls_for(s.plugin, "DELETE", "/containers/authz-m1")
    assert denied and denied[-1]["User"] == "mallory"
    assert denied[-1]["UserAuthNMethod"] == "TLS"
    assert denied[-1]["RequestUri"] == "/v1.23/containers/authz-m1"
    assert not calls_for(s.plugin, "DELETE", "/containers/authz-m1", "AuthZPlugin.AuthZRes")
    allowed = calls_for(s.plugin, "DELETE", "/containers/authz-a1", "AuthZPlugin.AuthZRes")
    assert allowed[-1]["User"] == "alice" and allowed[-1]["ResponseStatusCode"] == 204
    # the hijacked attach and the logs stream were authorized before they began, and the
    # plugin heard how they ended
    attach = calls_for(s.plugin, "POST", "/containers/authz-m5/attach")
    assert attach and attach[-1]["User"] == "mallory"
    res = calls_for(s.plugin, "POST", "/containers/authz-m5/attach", "AuthZPlugin.AuthZRes")
    assert res and res[-1]["ResponseStatusCode"] in (101, 200)
    m4 = json.loads(s.cli("alice", "inspect", "authz-m4").stdout)[0]["Id"]
    res = calls_for(s.plugin, "GET", f"/containers/{m4}/logs?follow=1", "AuthZPlugin.AuthZRes")
    assert res and res[-1]["ResponseStatusCode"] == 200 and "ResponseBody" not in res[-1]
    with s.local() as c:  # the unix socket: no user, so allowed
        for name in ("authz-m1", "authz-m2", "authz-m3", "authz-m4", "authz-m5"):
            assert c.delete(f"/containers/{name}", params={"force": 1}).status_code == 204


def test_mallory_pulls_with_progress(setup: Setup) -> None:
    if shutil.which("docker-registry") is None:
        pytest.skip("docker-registry (Debian's distribution) is not installed")
    registry = Registry().start()
    try:
        repo = f"{registry.domain}/authz-pull"
        with setup.local() as c:
            assert c.post("/images/busybox/tag", params={"repo": repo, "tag": "1"}) \
                .status_code == 201
            r = c.post(f"/images/{repo}/push", params={"tag": "1"},
                       headers={"X-Registry-Auth": "e30="})
            assert '"aux"' in r.text, r.text
            assert c.delete(f"/images/{repo}:1").status_code == 200
        pulled = setup.cli("mallory", "pull", f"{repo}:1", timeout=120)
        assert pulled.returncode == 0, pulled.stderr
        assert f"Status: Downloaded newer image for {repo}:1" in pulled.stdout
        req = calls_for(setup.plugin, "POST", "/images/create?fromImage=")[-1]
        assert req["User"] == "mallory"
        assert "X-Registry-Auth" not in req["RequestHeaders"]  # credentials never go out
        assert req["RequestHeaders"]["User-Agent"].startswith("Docker-Client/")
    finally:
        registry.stop()


# -- the SDKs ---------------------------------------------------------------------------------

# requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace the CA a client was given
# (psf/requests#3829): this machine sets them, a TLS user of the SDKs would unset them.
UNSET_CA_BUNDLES = "import os\nfor v in ('REQUESTS_CA_BUNDLE', 'CURL_CA_BUNDLE'):\n" \
    "    os.environ.pop(v, None)\n"

SDK7 = UNSET_CA_BUNDLES + r"""
import sys, docker
from docker.tls import TLSConfig
port, ca, cert, key, user = sys.argv[1:6]
tls = TLSConfig(client_cert=(cert, key), ca_cert=ca, verify=True)
c = docker.DockerClient(base_url=f"tcp://127.0.0.1:{port}", tls=tls, version="1.23")
made = c.containers.create("busybox", "true", name=f"sdk7-{user}")
try:
    made.remove()
    print("removed")
except docker.errors.APIError as e:
    print("refused", e.status_code, e.explanation)
    out = c.containers.run("busybox", "echo sdk7-ran", name=f"sdk7-run-{user}")
    print("ran", out.decode().strip())
    box = c.containers.run("busybox", "sleep 30", detach=True, name=f"sdk7-box-{user}")
    print("exec", box.exec_run("echo sdk7-exec").output.decode().strip())
    box.kill()
    att = c.containers.run("busybox", "sh -c 'sleep 1; echo sdk7-attached'", detach=True,
                           name=f"sdk7-att-{user}")
    print("attach", b"".join(att.attach(stdout=True, stream=True, logs=True)).decode().strip())
    print("logs", b"".join(c.containers.get(f"sdk7-run-{user}").logs(stream=True,
          follow=True)).decode().strip())
"""

# docker-py 1.10.6 asks for TLS 1.0 unless told otherwise, which svcd's TLS (OpenSSL 3's
# defaults) refuses: its users of a current daemon pass ssl_version.
DOCKERPY1 = UNSET_CA_BUNDLES + r"""
import ssl, sys, docker
from docker.tls import TLSConfig
port, ca, cert, key, user = sys.argv[1:6]
tls = TLSConfig(client_cert=(cert, key), ca_cert=ca, verify=True,
                ssl_version=ssl.PROTOCOL_TLSv1_2)
c = docker.Client(base_url=f"https://127.0.0.1:{port}", tls=tls, version="1.23")
made = c.create_container("busybox", "true", name=f"py1-{user}")
try:
    c.remove_container(made)
    print("removed")
except docker.errors.APIError as e:
    print("refused", e.response.status_code, e.explanation.decode())  # (bytes in 1.10.6)
    box = c.create_container("busybox", "sleep 30", name=f"py1-box-{user}")
    c.start(box)
    ex = c.exec_create(box, "echo py1-exec")
    print("exec", c.exec_start(ex).decode().strip())
    c.kill(box)
    att = c.create_container("busybox", "sh -c 'sleep 1; echo py1-attached'",
                             name=f"py1-att-{user}")
    c.start(att)
    print("attach", b"".join(c.attach(att, stream=True, logs=True)).decode().strip())
    print("logs", b"".join(c.logs(att, stream=True, follow=True)).decode().strip())
"""


@pytest.mark.parametrize(("sdk", "script"), [("sdk7", SDK7), ("dockerpy1", DOCKERPY1)])
def test_the_sdks_alice_removes_mallory_is_refused(setup: Setup, sdk: str, script: str) -> None:
    prefix = "sdk7" if sdk == "sdk7" else "py1"
    try:
        out = run_sdk(sdk, script, *setup.sdk_args("alice"), "alice")
        assert out.strip() == "removed", out
        out = run_sdk(sdk, script, *setup.sdk_args("mallory"), "mallory")
        lines = out.strip().splitlines()
        assert lines[0] == f"refused 403 {DENIED}", out
        if sdk == "sdk7":
            assert lines[1:] == ["ran sdk7-ran", "exec sdk7-exec", "attach sdk7-attached",
                                 "logs sdk7-ran"], out
        else:
            assert lines[1:] == ["exec py1-exec", "attach py1-attached",
                                 "logs py1-attached"], out
    finally:
        with setup.local() as c:
            for name in ("mallory", "run-mallory", "box-mallory", "att-mallory", "alice"):
                c.delete(f"/containers/{prefix}-{name}", params={"force": 1})

