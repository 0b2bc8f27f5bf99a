"""Probe routes for the test daemon (never part of svcd).

They exercise the foundation before the containers issue exists: a hijack echo at the paths the
SDK's socket helpers call, a long stream that records when its work was cancelled, and an event
publisher for the events tests and benchmarks.
"""

from __future__ import annotations

import json
import time

import trio
import trio.lowlevel
from quart import Blueprint, Response, request

from svc.api.hijack import hijack
from svc.api.streaming import respond_chunked
from svc.engine.engine import Engine
from svc.engine.events import SUBSCRIBER_LAG
from svc.wire import stdcopy

ECHO_ID = "probe-echo"


def install(app, engine: Engine) -> None:  # type: ignore[no-untyped-def]
    bp = Blueprint("probe", __name__)
    cancelled: dict[str, float] = {}

    async def echo_session() -> Response:
        """Echo stdin back as stdout frames until EOF, then a final 'bye' frame and close."""
        mode = request.args.get("mode", "frames")
        raw = await hijack(request)
        total = 0
        while True:
            data = await raw.receive_some()
            if not data:
                break
            total += len(data)
            await raw.send_all(data if mode == "raw" else stdcopy.encode_frame(1, data))
        bye = f"bye {total}\n".encode()
        await raw.send_all(bye if mode == "raw" else stdcopy.encode_frame(2, bye))
        await raw.aclose()
        return Response(b"")

    @bp.post(f"/containers/{ECHO_ID}/attach")
    async def attach_echo() -> Response:
        return await echo_session()

    @bp.post(f"/exec/{ECHO_ID}/start")
    async def exec_echo() -> Response:
        body = await request.get_json(force=True, silent=True) or {}
        if body.get("Detach"):
            return Response(b"", status=200)
        return await echo_session()

    @bp.post("/_probe/flood")
    async def flood() -> Response:
        """Hijack, then write until the client goes away; reports how it ended."""
        tag = request.args.get("tag", "flood")
        raw = await hijack(request)
        try:
            while True:
                await raw.send_all(b"x" * 65536)
        except trio.BrokenResourceError:
            cancelled[tag] = time.monotonic()
        return Response(b"")

    @bp.get("/_probe/stream")
    async def stream() -> Response:
        """A never-ending stream whose producer records when it was cancelled."""
        tag = request.args.get("tag", "stream")

        async def chunks():  # type: ignore[no-untyped-def]
            try:
                while True:
                    yield b"tick\n"
                    await trio.sleep(0.05)
            finally:
                cancelled[tag] = time.monotonic()

        return await respond_chunked(chunks(), content_type="text/plain")

    @bp.get("/_probe/cancelled")
    async def report() -> Response:
        now = time.monotonic()
        return Response(json.dumps({k: now - v for k, v in cancelled.items()}),
                        content_type="application/json")

    @bp.post("/_probe/events")
    async def publish() -> Response:
        """Publish n events: type/action/actor from the query (``numbered=1``: the i-th
        actor is ``{id}-{i}``); with ``paced=1`` it waits whenever a subscriber is half way
        to the cut-off (benchmarks measure sustainable delivery, not drops)."""
        n = int(request.args.get("n", "1"))
        paced = request.args.get("paced") == "1"
        etype = request.args.get("type", "container")
        action = request.args.get("action", "start")
        actor = request.args.get("id", "probe")
        attrs = json.loads(request.args.get("attrs", "{}"))
        numbered = request.args.get("numbered") == "1"
        bus = engine.events
        for i in range(n):
            if paced and i % 64 == 0:
                while bus.max_lag() > SUBSCRIBER_LAG // 2:
                    await trio.sleep(0.0005)
            bus.publish(etype, action, f"{actor}-{i}" if numbered else actor, attrs)
            if i % 64 == 63:
                await trio.lowlevel.checkpoint()
        return Response(json.dumps({"published": n, "time": time.time_ns()}),
                        content_type="application/json")

    @bp.put("/_probe/store/<collection>/<oid>")
    async def store_put(collection: str, oid: str) -> Response:
        """A durable write through the engine; the 200 is the acknowledgement."""
        record = await request.get_json(force=True)
        await engine.save_record(collection, oid, record)
        return Response(b"", status=200)

    @bp.get("/_probe/store/<collection>")
    async def store_list(collection: str) -> Response:
        """What the store holds on disk (what a restart would load)."""
        report = await trio.to_thread.run_sync(engine.store.load, collection)
        return Response(json.dumps(report.records), content_type="application/json")

    @bp.get("/_probe/params")
    async def params() -> Response:
        """Echo parsed query conventions so tests can check them over the socket."""
        from svc.api.params import qbool, qfilters

        out: dict[str, object] = {}
        for name in request.args:
            if name == "filters":
                out[name] = qfilters()
            else:
                out[name] = qbool(name)
        return Response(json.dumps(out), content_type="application/json")

    @bp.post("/_probe/body")
    async def body() -> Response:
        """Parse a JSON body into a wire model (unknown fields ignored) and echo it."""
        from svc.api.params import json_body
        from svc.models.base import WireModel

        class Sample(WireModel):
            Name: str
            Count: int = 0

        model = await json_body(Sample)
        assert model is not None
        return Response(model.wire(), content_type="application/json")

    @bp.get("/_probe/routes")
    async def routes() -> Response:
        """Every route svcd serves (rule and methods): what the fuzz test drives."""
        out = [{"rule": r.rule, "methods": sorted(r.methods - {"HEAD", "OPTIONS"})
                if r.methods else []} for r in app.url_map.iter_rules()
               if not r.rule.startswith("/_probe") and r.endpoint != "static"]
        return Response(json.dumps(out), content_type="application/json")

    app.register_blueprint(bp)
