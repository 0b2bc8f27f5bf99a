"""``POST /auth`` through the daemon: raw requests, the docker CLI and both SDKs, against
the htpasswd and token registries; bad credentials are 401s with the registry's reason, an
unreachable registry a quick clear error, and no credential reaches the daemon's log."""

from __future__ import annotations

import json

import httpx
import trio

from tests.conftest import docker_cli, run_sdk
from tests.registry.conftest import PASSWORD, USER
from tests.registry.registryd import Registry, free_port
from tests.support.daemon import Daemon

BAD_PASSWORD = "not-the-password-7f3a"


async def test_login_basic_and_token(client: httpx.AsyncClient, daemon: Daemon,
                                     basic_registry: Registry,
                                     token_registry: Registry) -> None:
    r = await client.post("/v1.23/auth", json={"username": USER, "password": PASSWORD,
                                               "serveraddress": basic_registry.domain})
    assert r.status_code == 200, r.text
    assert r.json() == {"Status": "Login Succeeded", "IdentityToken": ""}
    # Go folds field names: docker-py's capitalised spellings are the same fields
    r = await client.post("/v1.23/auth", json={"Username": USER, "PassWord": PASSWORD,
                                               "ServerAddress": f"http://{basic_registry.domain}/"})
    assert r.status_code == 200, r.text

    r = await client.post("/v1.23/auth", json={"username": USER, "password": BAD_PASSWORD,
                                               "serveraddress": basic_registry.domain})
    assert r.status_code == 401
    assert r.text == "unauthorized: authentication required\n"

    r = await client.post("/v1.23/auth", json={"username": USER, "password": PASSWORD,
                                               "serveraddress": token_registry.domain})
    assert r.status_code == 200, r.text
    assert r.json()["Status"] == "Login Succeeded"
    assert r.json()["IdentityToken"] == "idtoken-alice"  # the token server's refresh token
    r = await client.post("/v1.23/auth", json={"username": USER, "password": BAD_PASSWORD,
                                               "serveraddress": token_registry.domain})
    assert r.status_code == 401
    assert r.text == "incorrect username or password\n"
    assert BAD_PASSWORD not in daemon.log() and PASSWORD not in daemon.log()


async def test_login_errors(client: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        r = await client.post("/v1.23/auth", json={"username": USER, "password": PASSWORD,
                                                   "serveraddress": f"127.0.0.1:{free_port()}"})
    assert r.status_code == 503
    assert "is not reachable" in r.text
    with trio.fail_after(10):  # no internet here: Docker Hub is the default, and fails fast
        r = await client.post("/v1.23/auth", json={"username": USER, "password": PASSWORD})
    assert r.status_code == 503 and "docker.io" in r.text
    r = await client.post("/v1.23/auth", content=b"{", headers={
        "Content-Type": "application/json"})
    assert r.status_code == 400
    r = await client.post("/v1.23/auth", json={"username": 5})
    assert r.status_code == 400


def test_docker_cli_login(daemon: Daemon, basic_registry: Registry,
                          token_registry: Registry) -> None:
    for registry in (basic_registry, token_registry):
        out = docker_cli(daemon.url, "login", "-u", USER, "-p", PASSWORD, registry.domain)
        assert out.returncode == 0, out.stderr
        assert "Login Succeeded" in out.stdout
        bad = docker_cli(daemon.url, "login", "-u", USER, "-p", BAD_PASSWORD, registry.domain)
        assert bad.returncode != 0
        assert "Error response from daemon" in bad.stderr
    assert "authentication required" in docker_cli(
        daemon.url, "login", "-u", USER, "-p", BAD_PASSWORD, basic_registry.domain).stderr
    assert "incorrect username or password" in docker_cli(
        daemon.url, "login", "-u", USER, "-p", BAD_PASSWORD, token_registry.domain).stderr


SDK7 = """
import json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
ok = c.login(username=sys.argv[3], password=sys.argv[4], registry=sys.argv[2],
             dockercfg_path="/nonexistent/config.json")
try:
    c.login(username=sys.argv[3], password="wrong", registry=sys.argv[2], reauth=True,
            dockercfg_path="/nonexistent/config.json")
    bad = None
except docker.errors.APIError as e:
    bad = [e.status_code, e.explanation]
print(json.dumps({"ok": ok, "bad": bad}))
"""

DOCKERPY1 = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
ok = c.login(sys.argv[3], password=sys.argv[4], registry=sys.argv[2],
             dockercfg_path="/nonexistent/config.json")
try:
    c.login(sys.argv[3], password="wrong", registry=sys.argv[2], reauth=True,
            dockercfg_path="/nonexistent/config.json")
    bad = None
except docker.errors.APIError as e:
    bad = [e.response.status_code, e.explanation.decode() if isinstance(e.explanation, bytes)
           else e.explanation]
print(json.dumps({"ok": ok, "bad": bad}))
"""


def test_sdk_logins(daemon: Daemon, basic_registry: Registry) -> None:
    for sdk, script in (("sdk7", SDK7), ("dockerpy1", DOCKERPY1)):
        out = json.loads(run_sdk(sdk, script, daemon.url, basic_registry.domain, USER,
                                 PASSWORD))
        assert out["ok"]["Status"] == "Login Succeeded", (sdk, out)
        assert out["bad"][0] == 401, (sdk, out)
        assert "authentication required" in out["bad"][1], (sdk, out)
