"""Volume plugins (issue 29): what a plugin volume costs a container's start, beside a local
named volume.

A directory-backed test plugin (``tests/support/plugins/volume.py``, a real process on a unix
socket in the daemon's plugin directory) serves one volume; a local named volume is the floor.
Runs alternate between the two, on one keep-alive connection, a ``true`` container with
NetworkMode none each time:

* **start**: ``POST /containers/{id}/start`` alone: for the plugin's volume it holds the
  durable reference written before ``VolumeDriver.Mount`` and the call itself;
* **run**: create, start and wait (the ``Unmount`` and its record are in the teardown that
  ``wait`` sees end).

The overhead is the difference of the medians (target: at most 10 ms on start, 15 ms on the
run; the plugin answers each call in well under a millisecond).
"""

from __future__ import annotations

import statistics
import time

from bench import dockerapi
from bench.context import Context
from bench.harness import Figure, Outcome, Target


def _cycle(c: dockerapi.Client, volume: str) -> tuple[float, float]:
    """(start seconds, create+start+wait seconds) of one container using ``volume``."""
    t0 = time.perf_counter()
    body = {"Image": dockerapi.BUSYBOX, "Cmd": ["true"],
            "HostConfig": {"NetworkMode": "none", "Binds": [f"{volume}:/v"]}}
    cid = str(c.json("POST", "/containers/create", body, 201)["Id"])
    t1 = time.perf_counter()
    c.start(cid)
    t2 = time.perf_counter()
    c.wait(cid)
    t3 = time.perf_counter()
    c.remove(cid)
    return t2 - t1, t3 - t0


def volume_plugins(ctx: Context) -> Outcome:
    """Start and run of a container with a plugin's volume, beside a local named volume."""
    from tests.support.plugins.process import PluginProcess
    from tests.support.plugins.volume import mount_count

    sock = ctx.daemon.socket
    dockerapi.ensure_busybox(sock, ctx.workdir)
    n = ctx.scaled(40, 5)
    plugin = PluginProcess("benchvol", "volume", socket_dir=ctx.workdir / "plugins")
    ctx.cleanup.callback(plugin.stop)
    plugin.start()
    times: dict[str, list[tuple[float, float]]] = {"local": [], "plugin": []}
    with dockerapi.Client(sock) as c:
        c.json("POST", "/volumes/create", {"Name": "bench-local"}, 201)
        c.json("POST", "/volumes/create", {"Name": "bench-plugin", "Driver": "benchvol"}, 201)
        for kind in ("local", "plugin"):  # one of each first, not counted
            _cycle(c, f"bench-{kind}")
        for _ in range(n):
            for kind in ("local", "plugin"):
                times[kind].append(_cycle(c, f"bench-{kind}"))
        for kind in ("local", "plugin"):
            c.call("DELETE", f"/volumes/bench-{kind}", want=204)
    mounts = len(plugin.calls("VolumeDriver.Mount"))
    left = mount_count(plugin.state, "bench-plugin")
    out = _figures(times, n)
    out.details.update(plugin_mounts=mounts, plugin_count_left=left)
    if mounts != n + 1 or left != 0:
        out.warnings.append(f"the plugin saw {mounts} Mounts for {n + 1} starts and counts "
                            f"{left} mounts at the end")
    return out


def _figures(times: dict[str, list[tuple[float, float]]], n: int) -> Outcome:
    ms = 1000.0
    start = {k: statistics.median(t[0] for t in v) * ms for k, v in times.items()}
    run = {k: statistics.median(t[1] for t in v) * ms for k, v in times.items()}
    out = Outcome(details={"runs_each": n, "start_ms_p50": start, "run_ms_p50": run})
    out.figures += [
        Figure("volume_plugins", "start with a plugin volume, p50", start["plugin"], "ms",
               floor=start["local"], note=f"floor: a local named volume; {n} runs each"),
        Figure("volume_plugins", "start: plugin volume overhead, p50",
               start["plugin"] - start["local"], "ms", Target("<=", 10)),
        Figure("volume_plugins", "create+start+wait with a plugin volume, p50", run["plugin"],
               "ms", floor=run["local"], note="with the Unmount at teardown"),
        Figure("volume_plugins", "create+start+wait: plugin volume overhead, p50",
               run["plugin"] - run["local"], "ms", Target("<=", 15)),
    ]
    return out
