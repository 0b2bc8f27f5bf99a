"""The daemon-wide log defaults (``--log-driver``, ``--log-opt``): rotation for every container
that does not say otherwise, as dockerd merges them (issue 24, item 6)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import docker_cli
from tests.runtime.conftest import skip_reason
from tests.support.daemon import REPO, Daemon, with_busybox


@pytest.fixture(scope="module")
def rotating() -> Iterator[tuple[Daemon, httpx.Client]]:
    if reason := skip_reason():
        pytest.skip(reason)
    with with_busybox(Daemon(["--log-opt", "max-size=10k", "--log-opt", "max-file=2"])) as d, \
            httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                         timeout=30) as c:
        yield d, c


def _log_files(d: Daemon, cid: str) -> list[Path]:
    return sorted((d.root / "containers" / cid).glob("*-json.log*"))


def test_a_container_without_log_options_gets_the_daemons(
        rotating: tuple[Daemon, httpx.Client]) -> None:
    d, c = rotating
    cid = docker_cli(d.url, "run", "-d", "busybox", "sh", "-c",
                     "i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done").stdout.strip()
    assert c.post(f"/containers/{cid}/wait").json()["StatusCode"] == 0
    info = c.get(f"/containers/{cid}/json").json()
    assert info["HostConfig"]["LogConfig"] == {
        "Type": "json-file", "Config": {"max-size": "10k", "max-file": "2"}}
    files = _log_files(d, cid)
    assert [f.name.rsplit(".", 1)[-1] for f in files] == ["log", "1"]  # rotated, two kept
    assert all(f.stat().st_size <= 10_000 + 200 for f in files)
    assert docker_cli(d.url, "logs", "--tail", "1", cid).stdout == "line 2999\n"


def test_a_containers_own_options_win_and_another_driver_takes_none(
        rotating: tuple[Daemon, httpx.Client]) -> None:
    d, c = rotating
    cid = docker_cli(d.url, "create", "--log-opt", "max-size=1m", "busybox", "true").stdout.strip()
    assert c.get(f"/containers/{cid}/json").json()["HostConfig"]["LogConfig"] == {
        "Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}}
    cid = docker_cli(d.url, "create", "--log-driver", "none", "busybox", "true").stdout.strip()
    assert c.get(f"/containers/{cid}/json").json()["HostConfig"]["LogConfig"] == {
        "Type": "none", "Config": {}}
    assert c.get("/info").json()["LoggingDriver"] == "json-file"


@pytest.mark.parametrize("args, says", [
    (["--log-opt", "max-size=lots"], "invalid size: 'lots'"),
    (["--log-opt", "max-file=0"], "max-file cannot be less than 1"),
    (["--log-opt", "color=red"], "unknown log opt 'color'"),
    (["--log-driver", "carrier-pigeon"], "no log driver named 'carrier-pigeon'"),
    (["--log-opt", "max-size"], "use KEY=VALUE"),
])
def test_bad_log_defaults_stop_the_daemon_with_a_clear_message(args: list[str],
                                                               says: str) -> None:
    d = Daemon(args, probe=False)
    try:
        (d.dir / "none.json").write_text("{}")
        proc = subprocess.run([sys.executable, "-m", "svc", *d.command()[3:]], cwd=REPO,
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode != 0
        assert says in proc.stderr, proc.stderr
    finally:
        d.cleanup()
