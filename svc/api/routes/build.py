"""``POST /build``: the legacy builder (what ``DOCKER_BUILDKIT=0 docker build`` and the
SDKs' ``build()`` call at API 1.22/1.23).

The query and the instructions file are checked before the response starts (a bad tag,
JSON or number, a missing or unparsable instructions file: a 400, as dockerd answered what
failed before its first output line with a plain error). When the instructions file is the
context's first file, the response starts once it has arrived and the rest of the context
streams in while the steps run (a context refused then is an in-stream error); otherwise
the whole context is read and checked first (a refused context: a 400). The steps' output
streams back as ``{"stream"}`` lines, errors in-stream with HTTP 200. A client that goes
away cancels the build (``respond_chunked(..., keep_alive=True)``: the request's scope,
which keeps reading the upload while answering).
"""

from __future__ import annotations

from functools import partial

from quart import Blueprint, Response, request
from quart_trio import QuartTrio

from svc.api.hijack import raw_body
from svc.api.params import qbool, qint, qstr
from svc.api.progress import progress_lines
from svc.api.streaming import respond_chunked
from svc.api.wiring import Wired
from svc.engine.backend import BuildBackend
from svc.engine.builder.job import BuildSpec
from svc.errors import InvalidParameter
from svc.models.containers import HostConfigBody
from svc.wire import jsondoc
from svc.wire.authconfig import decode_config_header

bp = Blueprint("build", __name__)
_backend: Wired[BuildBackend] = Wired("build")


def register(app: QuartTrio, backend: BuildBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


def _json_map(name: str, *, nulls: bool) -> dict[str, str | None]:
    raw = qstr(name)
    if not raw:
        return {}
    try:
        data = jsondoc.loads(raw)
    except jsondoc.JSONError as exc:
        raise InvalidParameter(f"invalid {name} parameter: {exc}") from None
    if not isinstance(data, dict) or not all(
            isinstance(v, str) or (nulls and v is None) for v in data.values()):
        raise InvalidParameter(f"invalid {name} parameter: expected a JSON object of strings")
    return dict(data)


def _limits() -> HostConfigBody:
    return HostConfigBody(
        Memory=qint("memory", 0), MemorySwap=qint("memswap", 0),
        CpuShares=qint("cpushares", 0), CpusetCpus=qstr("cpusetcpus") or "",
        CpuPeriod=qint("cpuperiod", 0), CpuQuota=qint("cpuquota", 0),
        ShmSize=qint("shmsize", 0))


@bp.post("/build")
async def build() -> Response:
    builder = _backend.get().builder
    labels = {k: v or "" for k, v in _json_map("labels", nulls=False).items()}
    spec = builder.prepare(BuildSpec(
        tags=builder.tags(request.args.getlist("t")),
        svcfile=qstr("svcfile") or qstr("dockerfile") or None,
        quiet=qbool("q"), nocache=qbool("nocache"), rm=qbool("rm", True),
        forcerm=qbool("forcerm"), pull=qbool("pull"),
        buildargs=_json_map("buildargs", nulls=True), labels=labels,
        host_config=_limits(), remote=qstr("remote") or None,
        registry_auth=decode_config_header(request.headers.get("X-Registry-Config"))))
    body = raw_body(request) or request.body  # a context is read from the socket directly
    received = await builder.receive(spec, body)  # failures: HTTP errors
    lines = progress_lines(partial(builder.build, received), "build")
    return await respond_chunked(lines, content_type="application/json", keep_alive=True)
