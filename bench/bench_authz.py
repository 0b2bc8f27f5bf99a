"""What an allowing authorization plugin costs per request: ``GET /v1.23/containers/json`` (ps)
with and without one, on daemons of their own.

* Two daemons in turn, each of its own (``tests.support.daemon.Daemon``), the same but for
  ``--authorization-plugin authz`` on the second. The plugin is the Python test plugin
  (``tests/support/plugins/authz.py`` served by ``tests/support/plugins/server.py``, a
  threading ``http.server`` on a unix socket) with no rules, so it allows everything, and
  without recording its calls.
* Each daemon gets busybox and ``CONTAINERS`` created containers, so ps answers a real list;
  with the plugin, each request costs two plugin calls (``AuthZReq``, then ``AuthZRes``
  carrying the list) and goes through the app (the plugin routes' fast path is off).
* One keep-alive connection, closed loop (``bench.httpload``): 200 warm-up requests, then up
  to ``REQUESTS`` or ``SECONDS``. Reported: p50 and p99 with and without the plugin, their
  difference, and CPU per request of svcd and of the plugin process. No target: the figure
  is what a user pays per API call for the plugin, most of it the plugin's own time.
"""

from __future__ import annotations

from bench.bench_containers import IMAGE, Client, _check, _import_busybox
from bench.context import Context
from bench.harness import Figure, Outcome, cpu_seconds, request_bytes
from bench.httpload import LoadResult, run_load
from tests.support.daemon import Daemon
from tests.support.plugins.process import PluginProcess

CONTAINERS = 10
REQUESTS = 2000
SECONDS = 8.0
PATH = "/v1.23/containers/json"


def _prepare(d: Daemon) -> int:
    """Busybox and the containers; returns the size of ps's answer."""
    c = Client(d.sock)
    try:
        _import_busybox(c)
        for i in range(CONTAINERS):
            status, raw = c.call("POST", f"/v1.23/containers/create?name=authz-bench-{i}",
                                 {"Image": IMAGE, "Cmd": ["true"]})
            _check(status, raw, 201, "create a container")
        status, raw = c.call("GET", f"{PATH}?all=1")
        _check(status, raw, 200, "list the containers")
        return len(raw)
    finally:
        c.close()


def _measure(ctx: Context, d: Daemon, plugin_pid: int | None) -> dict[str, float | int]:
    assert d.proc is not None
    daemon_pid = d.proc.pid
    start: list[float] = []

    def on_start() -> None:
        start.append(cpu_seconds(daemon_pid))
        start.append(cpu_seconds(plugin_pid) if plugin_pid else 0.0)

    r: LoadResult = run_load(d.sock, request_bytes("GET", f"{PATH}?all=1"), conns=1,
                             max_requests=ctx.scaled(REQUESTS, 100),
                             max_seconds=SECONDS * min(1.0, ctx.scale), on_start=on_start)
    n = max(1, r.requests)
    return {"requests": r.requests, "errors": r.errors, "p50_ms": r.pct(50),
            "p99_ms": r.pct(99), "rps": r.rps,
            "svcd_cpu_us": 1e6 * (cpu_seconds(daemon_pid) - start[0]) / n,
            "plugin_cpu_us": 1e6 * (cpu_seconds(plugin_pid) - start[1]) / n
            if plugin_pid else 0.0}


def _run(ctx: Context, with_plugin: bool) -> tuple[dict[str, float | int], int]:
    d = Daemon(["--authorization-plugin", "authz"] if with_plugin else [])
    plugin = PluginProcess("authz", "authz", socket_dir=d.plugin_dir, args={"record": "0"}) \
        if with_plugin else None
    try:
        if plugin is not None:
            plugin.start()
        d.start(timeout=60)
        size = _prepare(d)
        pid = plugin.proc.pid if plugin is not None and plugin.proc is not None else None
        return _measure(ctx, d, pid), size
    finally:
        d.cleanup()
        if plugin is not None:
            plugin.stop()


def authz(ctx: Context) -> Outcome:
    """ps p50/p99 with and without one allowing authz plugin, and the difference."""
    without, size = _run(ctx, False)
    with_, _ = _run(ctx, True)
    out = Outcome(details={"without_plugin": without, "with_plugin": with_,
                           "containers": CONTAINERS, "answer_bytes": size})
    for result in (without, with_):
        if result["errors"]:
            out.warnings.append(f"{result['errors']} non-200 answers to ps")
    note = f"{CONTAINERS} containers ({size} B answer); 1 connection"
    for p in ("p50", "p99"):
        out.figures += [
            Figure("authz", f"ps {p} without a plugin", float(without[f"{p}_ms"]), "ms",
                   note=note),
            Figure("authz", f"ps {p} with an allowing plugin", float(with_[f"{p}_ms"]), "ms",
                   floor=float(without[f"{p}_ms"]), note="floor: without"),
            Figure("authz", f"ps {p}: the plugin's cost per request",
                   float(with_[f"{p}_ms"]) - float(without[f"{p}_ms"]), "ms"),
        ]
    out.figures += [
        Figure("authz", "svcd CPU per ps, with the plugin", float(with_["svcd_cpu_us"]), "µs",
               floor=float(without["svcd_cpu_us"]), note="floor: without"),
        Figure("authz", "the plugin's CPU per ps (2 calls)", float(with_["plugin_cpu_us"]),
               "µs", note="Python http.server, one thread per connection"),
    ]
    return out
