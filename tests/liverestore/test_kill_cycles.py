"""Live restore under twenty SIGKILLs at random moments, with containers running throughout
and clients hammering the API: no container dies or is taken back twice, no log line is lost
or repeated, and nothing leaks (one monitor per container, one veth per endpoint, the port
rules once)."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
from pathlib import Path

import httpx

from svc.network import bridge as br
from svc.network.firewall import owner_of
from tests.liverestore.conftest import alive, cli, curl, inspect
from tests.liverestore.test_live_restore import COUNTER, _numbers
from tests.support.daemon import Daemon
from tests.support.etcdd import free_port

CYCLES = 20
SEED = int(os.environ.get("SVC_CRASH_SEED", "4242"))


def _monitors(d: Daemon) -> list[int]:
    """The monitors (svc-shim, or conmon for exec sessions) of ``d``'s containers (their
    directories are its)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) in (b"svc-shim", b"conmon") and \
                any(str(d.root).encode() in a for a in argv):
            out.append(int(entry))
    return out


def _hammer(d: Daemon, stop: threading.Event) -> None:
    """Reads and lifecycle requests as fast as they go, through every kill (errors are
    expected while the daemon is down)."""
    while not stop.is_set():
        try:
            with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)),
                              base_url="http://svc", timeout=2) as c:
                while not stop.is_set():
                    c.get("/containers/json")
                    c.get("/containers/counter0/json")
                    c.get("/containers/counter0/logs", params={"stdout": "1", "tail": "5"})
        except (httpx.HTTPError, OSError):
            time.sleep(0.02)


def test_twenty_sigkills_with_containers_running_throughout(lr: Daemon) -> None:
    rng = random.Random(SEED)
    port = free_port()
    for i in range(3):
        cli(lr, "run", "-d", "--name", f"counter{i}", "busybox", "sh", "-c", COUNTER)
    cli(lr, "run", "-d", "--name", "web", "-p", f"{port}:80", "busybox", "sh", "-c",
        "echo served > /index.html; exec httpd -f -p 80 -h /")
    names = ["counter0", "counter1", "counter2", "web"]
    pids = {n: inspect(lr, n, "{{.State.Pid}}") for n in names}
    monitors = sorted(_monitors(lr))
    assert len(monitors) == len(names)
    veths = sorted(br.links_on(lr.bridge))
    owner = owner_of((lr.root / "engine-id").read_text().strip())
    rules = _rules(owner)
    stop = threading.Event()
    hammer = threading.Thread(target=_hammer, args=(lr, stop), daemon=True)
    hammer.start()
    try:
        for cycle in range(CYCLES):
            time.sleep(rng.uniform(0.05, 0.3))
            lr.kill()
            assert all(alive(int(p)) for p in pids.values()), f"cycle {cycle}: one died"
            lr.start()
            assert _pids(lr, names) == pids, cycle
    finally:
        stop.set()
        hammer.join(timeout=10)
    assert sorted(_monitors(lr)) == monitors  # none more, none replaced
    assert sorted(br.links_on(lr.bridge)) == veths
    assert _rules(owner) == rules
    assert curl(f"http://127.0.0.1:{port}/") == "served"
    for name in names[:3]:
        numbered = _numbers(lr, name)
        logged = [n for _, n in numbered]
        bad = next((i for i, n in enumerate(logged) if n != i), None)
        assert bad is None, (f"{name}: a line lost or repeated at {bad}: "
                             f"{numbered[max(0, (bad or 0) - 3):(bad or 0) + 3]}")
        assert len(logged) > 100


def _pids(d: Daemon, names: list[str]) -> dict[str, str]:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(d.sock)), base_url="http://svc",
                      timeout=10) as c:
        return {n: str(c.get(f"/containers/{n}/json").json()["State"]["Pid"]) for n in names}


def _rules(owner: str) -> list[str]:
    out = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    return sorted(line for line in out.splitlines() if f"svc:{owner}:" in line)
