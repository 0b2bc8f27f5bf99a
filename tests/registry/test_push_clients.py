"""Pushes by the real clients (docker CLI 28, docker SDK 7.0.0, docker-py 1.10.6) to the
htpasswd and token registries, and a push cut off by its client: it stops at once, records
nothing a registry did not confirm, and the next push completes."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import trio

from tests.conftest import docker_cli, run_sdk
from tests.registry.conftest import PASSWORD, USER, unique
from tests.registry.pushing import load_image, messages, random_layers, short, statuses
from tests.registry.registryd import Registry
from tests.support import images as timg
from tests.support.daemon import Daemon
from tests.support.http import connect, read_head


async def test_docker_cli_login_and_push(client: httpx.AsyncClient, daemon: Daemon,
                                         basic_registry: Registry) -> None:
    repo = f"{basic_registry.domain}/{unique('cli')}"
    await load_image(client, random_layers(100_000, 20_000), f"{repo}:latest")

    def cli(*args: str) -> tuple[int, str, str]:
        out = docker_cli(daemon.url, *args, timeout=120)
        return out.returncode, out.stdout, out.stderr

    code, _, err = await trio.to_thread.run_sync(cli, "logout", basic_registry.domain)
    code, out, err = await trio.to_thread.run_sync(cli, "push", f"{repo}:latest")
    assert code != 0 and "authentication required" in out + err, (out, err)
    code, out, err = await trio.to_thread.run_sync(
        cli, "login", "-u", USER, "-p", PASSWORD, basic_registry.domain)
    assert code == 0, err
    code, out, err = await trio.to_thread.run_sync(cli, "push", f"{repo}:latest")
    assert code == 0, err
    assert f"The push refers to a repository [{repo}]" in out
    assert out.count(": Pushed") == 2, out
    digest_line = [line for line in out.splitlines() if line.startswith("latest: digest: ")]
    assert len(digest_line) == 1, out
    code, again, err = await trio.to_thread.run_sync(cli, "push", f"{repo}:latest")
    assert code == 0, err
    assert again.count(": Layer already exists") == 2, again
    assert digest_line[0] in again
    code, out, err = await trio.to_thread.run_sync(
        cli, "images", "--digests", "--format", "{{.Repository}} {{.Digest}}", repo)
    assert out.split() == [repo, digest_line[0].split()[2]]


SDK7 = """
import json, sys, docker
c = docker.DockerClient(base_url=sys.argv[1], version="1.23")
c.login(username=sys.argv[3], password=sys.argv[4], registry=sys.argv[2],
        dockercfg_path="/nonexistent/config.json")
out = list(c.images.push(sys.argv[5], tag="v1", stream=True, decode=True))
print(json.dumps(out))
"""

DOCKERPY1 = """
import json, sys, docker
c = docker.Client(base_url=sys.argv[1], version="1.23")
c.login(sys.argv[3], password=sys.argv[4], registry=sys.argv[2],
        dockercfg_path="/nonexistent/config.json")
text = c.push(sys.argv[5], tag="v1")
streamed = list(c.push(sys.argv[5], tag="v1", stream=True, decode=True))
print(json.dumps({"text": text, "streamed": streamed}))
"""


async def test_sdk_pushes(client: httpx.AsyncClient, daemon: Daemon,
                          token_registry: Registry) -> None:
    layers = random_layers(50_000, 3_000)
    shorts = [short(timg.diff_id(x)) for x in layers]
    repo7 = f"{token_registry.domain}/{unique('sdk7')}"
    repo1 = f"{token_registry.domain}/{unique('dockerpy')}"
    await load_image(client, layers, f"{repo7}:v1", f"{repo1}:v1")

    def sdk(name: str, script: str, repo: str) -> str:
        return run_sdk(name, script, daemon.url, token_registry.domain, USER, PASSWORD, repo,
                       timeout=120)

    out7 = json.loads(await trio.to_thread.run_sync(sdk, "sdk7", SDK7, repo7))
    assert out7[-1]["aux"]["Tag"] == "v1"
    for s in shorts:
        assert statuses(out7, s)[-1] == "Pushed", out7
    out1 = json.loads(await trio.to_thread.run_sync(sdk, "dockerpy1", DOCKERPY1, repo1))
    first = messages(out1["text"])
    for s in shorts:
        assert statuses(first, s) == ["Preparing", f"Mounted from {repo7.split('/', 1)[1]}"]
    assert first[-1]["aux"]["Digest"] == out7[-1]["aux"]["Digest"]
    for s in shorts:
        assert statuses(out1["streamed"], s) == ["Preparing", "Layer already exists"]
    assert out1["streamed"][-1]["aux"] == first[-1]["aux"]


def _upload_bytes(registry: Registry, path: str) -> int:
    uploads = registry.storage / "docker/registry/v2/repositories" / path / "_uploads"
    return sum(p.stat().st_size for p in uploads.glob("*/data")) if uploads.exists() else 0


async def test_disconnect_mid_push(client: httpx.AsyncClient, daemon: Daemon,
                                   open_registry: Registry) -> None:
    path = unique("cut")
    repo = f"{open_registry.domain}/{path}"
    big = random_layers(60_000_000)[0]
    big_id = timg.diff_id(big)
    await load_image(client, [big], f"{repo}:latest")
    s = await connect(daemon.sock)
    await s.send_all(f"POST /v1.23/images/{repo}/push?tag=latest HTTP/1.1\r\nHost: svc\r\n"
                     "X-Registry-Auth: e30=\r\nContent-Length: 0\r\n\r\n".encode())
    buf = bytearray()
    head = await read_head(s, buf)
    assert head.startswith(b"HTTP/1.1 200")
    with trio.fail_after(30):
        while _upload_bytes(open_registry, path) < 2_000_000:
            buf += await s.receive_some()
    assert b'"Pushing"' in buf
    await s.aclose()
    await trio.sleep(0.1)
    stopped = _upload_bytes(open_registry, path)
    await trio.sleep(0.7)
    assert _upload_bytes(open_registry, path) == stopped  # nothing sent 100 ms after
    assert stopped < len(big)
    recorded = json.loads((Path(daemon.root) / "distribution.json").read_text()) \
        if (Path(daemon.root) / "distribution.json").exists() else {"layers": {}}
    assert big_id not in recorded["layers"]

    r = await client.post(f"/v1.23/images/{repo}/push", params={"tag": "latest"},
                          headers={"X-Registry-Auth": "e30="}, timeout=120)
    msgs = messages(r.text)
    assert statuses(msgs, short(big_id))[-1] == "Pushed", r.text
    assert msgs[-1]["aux"]["Tag"] == "latest"
    recorded = json.loads((Path(daemon.root) / "distribution.json").read_text())
    assert [b[1] for b in recorded["layers"][big_id]] == [repo]
