"""Shared fixtures: one test daemon for the session, extra daemons on demand, HTTP clients."""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.daemon import REPO, Daemon

SDK_VENVS = {"sdk7": REPO / ".venv-sdk7", "dockerpy1": REPO / ".venv-dockerpy1"}


@pytest.fixture(scope="session", autouse=True)
def _host_forwarding() -> Iterator[None]:
    """Test daemons turn IPv4 forwarding on for their bridges, and one killed on purpose
    cannot turn it back: the suite leaves the host's setting as it found it."""
    knob = Path("/proc/sys/net/ipv4/ip_forward")
    before = knob.read_text() if knob.exists() else None
    yield
    if before is not None:
        with contextlib.suppress(OSError):
            knob.write_text(before)


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    """The session's test daemon (svcd plus probe routes), stopped with SIGTERM at the end."""
    d = Daemon()
    try:
        d.start()
        yield d
        code = d.stop()
        assert code == 0, f"svcd exited with {code}:\n{d.log()}"
        assert not d.forked_without_exec(), d.log()
        assert not d.sock.exists(), "the socket must be removed on shutdown"
    finally:
        d.cleanup()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Daemon]]:
    """Start extra daemons (own root/socket/pidfile); all are killed and removed afterwards."""
    made: list[Daemon] = []

    def start(args: list[str] | tuple[str, ...] = (), *, wait: bool = True, **kw: object) -> Daemon:
        d = Daemon(args, **kw)  # type: ignore[arg-type]
        made.append(d)
        return d.start(wait=wait)

    yield start
    for d in made:
        d.cleanup()


def http_client(sock: Path | str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)),
                             base_url="http://svc", timeout=30)


@pytest.fixture
async def client(daemon: Daemon) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(daemon.sock) as c:
        yield c


@functools.cache
def _docker_config_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="svct-docker-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def docker_cli(host: str, *args: str, timeout: float = 60,
               extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real docker CLI against a daemon; a private DOCKER_CONFIG avoids user state."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("the docker CLI is not installed on this machine")
    cfg = _docker_config_dir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env.update(DOCKER_HOST=host, DOCKER_CONFIG=str(cfg))
    env.update(extra_env or {})
    return subprocess.run([docker, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def sdk_python(name: str) -> str:
    py = SDK_VENVS[name] / "bin" / "python"
    if not py.exists():
        pytest.fail(f"{py} is missing: run scripts/setup.sh")
    return str(py)


def run_sdk(name: str, script: str, *args: str, timeout: float = 60) -> str:
    """Run a Python snippet in one of the SDK venvs; returns stdout, fails on a non-zero exit."""
    proc = subprocess.run([sdk_python(name), "-c", script, *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{name} script failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


__all__ = ["docker_cli", "http_client", "run_sdk", "sys"]


# -- every test file is collected --------------------------------------------------------------
# A whole run (no paths given) must collect every tests/**/test_*.py: pytest's default
# norecursedirs once skipped the build tests (then in folders named "build") without a word.

_TESTS = Path(__file__).resolve().parent
_files_with_items: set[Path] = set()


def pytest_itemcollected(item: pytest.Item) -> None:
    _files_with_items.add(Path(item.path).resolve())


def pytest_collection_finish(session: pytest.Session) -> None:
    if [Path(a).resolve() for a in session.config.args] != [_TESTS]:
        return
    files = {p.resolve() for p in _TESTS.rglob("test_*.py") if "data" not in p.parts}
    if missing := sorted(str(p.relative_to(_TESTS)) for p in files - _files_with_items):
        raise pytest.UsageError("test files the run did not collect (norecursedirs?): "
                                + ", ".join(missing))
