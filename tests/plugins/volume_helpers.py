"""What the volume plugin tests share: volume plugins started for a test, the CLI, waiting for
what a plugin is asked, the daemon's records (the fixtures are in conftest.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import docker_cli
from tests.support.daemon import Daemon
from tests.support.plugins.process import PluginProcess
from tests.support.plugins.volume import mount_count, read_state

__all__ = ["mount_count", "read_state"]


def clean(d: Daemon) -> None:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                      timeout=60) as c:
        for item in c.get("/containers/json", params={"all": "1"}).json():
            c.delete(f"/containers/{item['Id']}", params={"force": "1", "v": "1"})
        for v in c.get("/volumes").json()["Volumes"] or []:
            c.delete(f"/volumes/{v['Name']}")


def volume_plugin(plugins: list[PluginProcess], d: Daemon, name: str,
                  **kw: Any) -> PluginProcess:
    """A started directory-backed volume plugin called ``name``, found by its socket in
    ``d``'s plugin directory (or as ``kw`` says)."""
    if "socket_dir" not in kw and "tcp" not in kw:
        kw["socket_dir"] = d.plugin_dir
    p = PluginProcess(name, "volume", **kw)
    plugins.append(p)
    return p.start()


def cli(host: str, *args: str, ok: bool = True, timeout: float = 60) -> str:
    r = docker_cli(host, *args, timeout=timeout)
    if ok:
        assert r.returncode == 0, f"docker {' '.join(args)}: {r.stdout}{r.stderr}"
        return r.stdout
    assert r.returncode != 0, f"docker {' '.join(args)} should have failed: {r.stdout}"
    return r.stderr


def wait_for(what: Callable[[], Any], timeout: float = 15.0, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {message or what}")
        time.sleep(0.05)


def bodies(p: PluginProcess, method: str) -> list[dict[str, Any]]:
    return [c["body"] for c in p.calls(f"VolumeDriver.{method}")]


def record(d: Daemon, name: str) -> dict[str, Any]:
    """The daemon's durable record of volume ``name``."""
    return json.loads((d.root / "store" / "volumes" / f"{name}.json").read_text())  # type: ignore[no-any-return]


def mounted_under(path: Path) -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point.startswith(str(path)):
            out.append(point)
    return out
