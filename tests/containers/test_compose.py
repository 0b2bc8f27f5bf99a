"""docker-compose 1.9.0, unchanged, as a client: a version-2 file (API 1.22) with a build,
networks (one internal, with IPAM), named and anonymous volumes, depends_on, links, an
environment with an empty value and resource limits; a version-1 file (API 1.21). What
compose prints and what the containers then are is what is checked (issue 25)."""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import REPO, Daemon, _free_subnet

COMPOSE = REPO / ".venv-compose" / "bin" / "docker-compose"

V2 = """\
version: "2"
services:
  db:
    image: busybox
    command: sh -c "echo db up; echo A=$$A; sleep 300"
    environment:
      - EMPTY
      - A=1
    volumes:
      - data:/data
      - /anon
    networks: [back]
    cpu_shares: 256
    cpuset: "0"
    mem_limit: 64m
  web:
    build: ./web
    depends_on: [db]
    links: [db]
    networks: [back, front]
volumes:
  data: {}
networks:
  back:
    internal: true
    ipam:
      config:
        - subnet: SUBNET
  front: {}
"""

V1 = """\
app:
  image: busybox
  command: sh -c "echo v1 up; sleep 300"
  environment:
    - EMPTY
  cpu_shares: 128
"""


def _api(d: Daemon) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                        timeout=30)


@pytest.fixture
def project(cdaemon: Daemon, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    if not COMPOSE.exists():
        pytest.skip(f"{COMPOSE} is missing: run scripts/setup.sh")
    name = "svct" + uuid.uuid4().hex[:8]
    yield tmp_path, name
    _compose(cdaemon, tmp_path, name, "down", "-v", "--rmi", "local", check=False)


def _compose(d: Daemon, where: Path, name: str, *args: str, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
    env.update(DOCKER_HOST=d.url, COMPOSE_PROJECT_NAME=name, COMPOSE_HTTP_TIMEOUT="120")
    proc = subprocess.run([str(COMPOSE), *args], cwd=where, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    if check:
        assert proc.returncode == 0, f"compose {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_a_version_2_project_from_up_to_down(cdaemon: Daemon,
                                            project: tuple[Path, str]) -> None:
    where, name = project
    subnet = str(ipaddress.IPv4Interface(_free_subnet()).network)
    (where / "docker-compose.yml").write_text(V2.replace("SUBNET", subnet))
    (where / "web").mkdir()
    (where / "web" / "Dockerfile").write_text(
        'FROM busybox\nCMD ["sh", "-c", "echo web up; sleep 300"]\n')
    up = _compose(cdaemon, where, name, "up", "-d")
    assert f"Creating {name}_db_1" in up.stderr and f"Creating {name}_web_1" in up.stderr
    ps = _compose(cdaemon, where, name, "ps").stdout
    assert f"{name}_db_1" in ps and f"{name}_web_1" in ps and ps.count(" Up ") == 2
    with _api(cdaemon) as c:
        db = c.get(f"/containers/{name}_db_1/json").json()
        hc = db["HostConfig"]
        assert hc["CpuShares"] == 256 and hc["CpusetCpus"] == "0" and hc["Memory"] == 64 << 20
        assert "EMPTY" in db["Config"]["Env"]
        dests = {m["Destination"]: m for m in db["Mounts"]}
        assert dests["/data"]["Name"] == f"{name}_data" and "/anon" in dests
        back = c.get(f"/networks/{name}_back").json()
        assert back["Internal"] is True and back["IPAM"]["Config"] == [{"Subnet": subnet}]
        web = c.get(f"/containers/{name}_web_1/json").json()
        assert set(web["NetworkSettings"]["Networks"]) == {f"{name}_back", f"{name}_front"}
    logs = _compose(cdaemon, where, name, "logs", "--no-color").stdout
    assert "db up" in logs and "A=1" in logs and "web up" in logs
    # exec, run --rm, scale, restart, kill, stop -t
    out = _compose(cdaemon, where, name, "exec", "-T", "db", "sh", "-c", "echo got=$A").stdout
    assert out.strip() == "got=1"
    # (dockerpty under Python 3 attaches lazily, after the start: a command that prints at
    # once may finish before the attach, with the engines too; this one waits a moment)
    ran = _compose(cdaemon, where, name, "run", "--rm", "-T", "db", "sh", "-c",
                   "sleep 1; echo one-off")
    assert "one-off" in ran.stdout
    _compose(cdaemon, where, name, "scale", "web=2")
    assert _compose(cdaemon, where, name, "ps").stdout.count(" Up ") == 3
    _compose(cdaemon, where, name, "restart", "-t", "1")
    _compose(cdaemon, where, name, "kill", "web")
    _compose(cdaemon, where, name, "stop", "-t", "1")
    assert " Up " not in _compose(cdaemon, where, name, "ps").stdout
    _compose(cdaemon, where, name, "down", "-v", "--rmi", "local")
    with _api(cdaemon) as c:
        assert c.get(f"/containers/{name}_db_1/json").status_code == 404
        assert c.get(f"/networks/{name}_back").status_code == 404
        assert c.get(f"/volumes/{name}_data").status_code == 404
        assert c.get(f"/images/{name}_web/json").status_code == 404


def test_a_version_1_project(cdaemon: Daemon, project: tuple[Path, str]) -> None:
    where, name = project
    (where / "docker-compose.yml").write_text(V1)
    _compose(cdaemon, where, name, "up", "-d")
    with _api(cdaemon) as c:
        app = c.get(f"/containers/{name}_app_1/json").json()
        assert app["State"]["Running"] is True and app["HostConfig"]["CpuShares"] == 128
    assert "v1 up" in _compose(cdaemon, where, name, "logs", "--no-color").stdout
    _compose(cdaemon, where, name, "down")
    with _api(cdaemon) as c:
        assert c.get(f"/containers/{name}_app_1/json").status_code == 404


def _popen(d: Daemon, where: Path, name: str, *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
    env.update(DOCKER_HOST=d.url, COMPOSE_PROJECT_NAME=name)
    return subprocess.Popen([str(COMPOSE), *args], cwd=where, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=_ctrl_c_as_in_a_terminal)


def _ctrl_c_as_in_a_terminal() -> None:
    """In the child: SIGINT as a terminal's process has it. A suite started in the background
    (``cmd &`` in a shell) ignores SIGINT, a child inherits that, and compose's ``logs -f``
    (which sets no handler of its own) would never see a Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _read_until(p: subprocess.Popen[str], text: str, timeout: float) -> str:
    """What ``p`` printed until ``text`` appeared (read from its pipe's descriptor, so that
    ``communicate`` can read the rest)."""
    import select
    import time

    assert p.stdout is not None
    fd, got = p.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while text.encode() not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"{text!r} never shown: {got[-500:]!r}"
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            assert chunk, f"ended before {text!r} was shown: {got[-500:]!r}"
            got += chunk
    return got.decode()


def _wait_running(d: Daemon, ref: str, timeout: float = 60) -> None:
    import time

    deadline = time.monotonic() + timeout
    with _api(d) as c:
        while time.monotonic() < deadline:
            r = c.get(f"/containers/{ref}/json")
            if r.status_code == 200 and r.json()["State"]["Running"]:
                return
            time.sleep(0.2)
    raise AssertionError(f"{ref} never ran")


def test_up_in_the_foreground_ctrl_c_twice_logs_f_and_events(
        cdaemon: Daemon, project: tuple[Path, str]) -> None:
    """``up`` attached; ``logs -f`` and ``events --json`` follow; the first Ctrl-C stops (the
    shell ignores SIGTERM: a 10 s grace), the second kills at once and compose exits."""
    import json
    import signal
    import time

    where, name = project
    (where / "docker-compose.yml").write_text(V1.replace("v1 up", "fg up"))
    with _api(cdaemon) as c:
        listening = c.get("/info").json()["NEventsListener"]
        events = _popen(cdaemon, where, name, "events", "--json")
        deadline = time.monotonic() + 30  # compose's events sees only what follows its start
        while c.get("/info").json()["NEventsListener"] <= listening:
            assert time.monotonic() < deadline, "compose events never subscribed"
            time.sleep(0.1)
    up = _popen(cdaemon, where, name, "up")
    follow: subprocess.Popen[str] | None = None
    try:
        _wait_running(cdaemon, f"{name}_app_1")
        follow = _popen(cdaemon, where, name, "logs", "-f", "--no-color")
        # Ctrl-C once the line is shown, as a user presses it
        shown = _read_until(follow, "fg up", 30)
        follow.send_signal(signal.SIGINT)
        logged = shown + follow.communicate(timeout=10)[0]
        assert "fg up" in logged
        up.send_signal(signal.SIGINT)
        time.sleep(1.5)
        start = time.monotonic()
        up.send_signal(signal.SIGINT)
        out = up.communicate(timeout=15)[0]
        assert time.monotonic() - start < 10, out
        assert "fg up" in out
        with _api(cdaemon) as c:
            assert c.get(f"/containers/{name}_app_1/json").json()["State"]["Running"] is False
    finally:
        for p in (up, events, follow):
            if p is not None and p.poll() is None:
                p.kill()
    seen = [json.loads(line) for line in events.communicate(timeout=10)[0].splitlines()
            if line.startswith("{")]
    actions = {e["action"] for e in seen if e.get("service") == "app"}
    assert {"create", "start"} <= actions, seen[:5]
