"""GET /containers/json and GET /containers/{id}/json: the container reads clients poll.

Both are plain routes too (``svc.api.fastpath``): without ``size=1`` (which reads the
container's files) they are answered by the protocol straight from memory. An inspect's
encoded answer is kept per container and API version (``encoded_inspect``) and served again
until anything it shows may have changed; so is most of each list entry.
"""

from __future__ import annotations

import logging
from typing import Any

import pydantic_core
from quart import Blueprint, Response, request
from quart_trio import QuartTrio
from werkzeug.datastructures import MultiDict

from svc.api import container_shapes as shapes
from svc.api.fastpath import Answer, Plain, plain_alternative
from svc.api.params import parse_bool, parse_filters, parse_int
from svc.api.shaping import json_response
from svc.api.versioning import Version, api_version
from svc.api.wiring import Wired
from svc.engine.backend import ContainersBackend
from svc.engine.containers.container import Container
from svc.engine.containers.links import link_names
from svc.engine.containers.listing import FILTERS, select

log = logging.getLogger("svc.api")
bp = Blueprint("container_reads", __name__)
_backend: Wired[ContainersBackend] = Wired("container reads")


def register(app: QuartTrio, backend: ContainersBackend) -> None:
    """Give the routes their backend and add them to ``app``."""
    _backend.set(backend)
    app.register_blueprint(bp)


# -- the list ----------------------------------------------------------------------------------

@bp.get("/containers/json")
async def list_containers() -> Response:
    version = api_version()
    if not parse_bool("size", request.args.get("size")):
        return Response(listing(request.args, version), content_type="application/json")
    svc = _backend.get().containers
    out = []
    for c, names in _selected(request.args):
        out.append(_summary(c, names, version, await svc.ops.sizes(c)))
    return json_response(out)


@plain_alternative(bp, "list_containers")
def list_plain(req: Plain) -> Answer | None:
    if parse_bool("size", req.args.get("size")):
        return None  # sizes read the disk: the full way
    return Answer(listing(req.args, req.version))


def listing(args: MultiDict[str, str], version: Version) -> bytes:
    """The list without sizes, encoded (each entry mostly kept encoded: see
    ``shapes.encoded_summary``)."""
    nets = _backend.get().networks
    out = []
    for c, names in _selected(args):
        try:
            out.append(shapes.encoded_summary(c, nets, names, version))
        except Exception:  # one misshapen record never fails the list for everyone
            log.exception("container %s cannot be listed in full", c.id)
            out.append(pydantic_core.to_json(shapes.fallback_summary(c, names)))
    return b"[" + b",".join(out) + b"]\n"


def _selected(args: MultiDict[str, str]) -> list[tuple[Container, list[str]]]:
    backend = _backend.get()
    svc = backend.containers
    found = select(svc.all(), backend.images, svc.resolve,
                   all_=parse_bool("all", args.get("all")),
                   limit=parse_int("limit", args.get("limit")), since=args.get("since"),
                   before=args.get("before"), filters=parse_filters(args.get("filters"), FILTERS),
                   networks_of=svc.network_names)
    aliases = link_names(list(svc.all()))
    return [(c, [c.name, *aliases.get(c.id, [])]) for c in found]


def _summary(c: Container, names: list[str], version: Version,
             sizes: tuple[int, int] | None) -> dict[str, Any]:
    try:
        return shapes.summary(c, _backend.get().networks, names, version, sizes)
    except Exception:  # one misshapen record never fails the list for everyone
        log.exception("container %s cannot be listed in full", c.id)
        return shapes.fallback_summary(c, names)


# -- inspect -----------------------------------------------------------------------------------

@bp.get("/containers/<ref>/json")
async def inspect(ref: str) -> Response:
    backend = _backend.get()
    c = backend.containers.resolve(ref)
    version = api_version()
    if not parse_bool("size", request.args.get("size")):
        return Response(encoded_inspect(c, version), content_type="application/json")
    sizes = await backend.containers.ops.sizes(c)
    return json_response(shapes.inspect(c, backend.images, backend.networks, version, sizes))


@plain_alternative(bp, "inspect")
def inspect_plain(req: Plain, ref: str) -> Answer | None:
    if parse_bool("size", req.args.get("size")):
        return None  # sizes read the disk: the full way
    return Answer(encoded_inspect(_backend.get().containers.resolve(ref), req.version))


def encoded_inspect(c: Container, version: Version) -> bytes:
    """``c``'s inspect body at ``version``, encoded, built again only when something it
    shows may have changed.

    Every change to a container is saved (which bumps its ``revision``) or announced by an
    event (the bus's sequence number covers the networks and images the body shows, too);
    the process, exec and restart figures that change in memory first are in the key as
    well. A read between a change and its save or event sees the change itself: the key is
    taken before the body is built, with no checkpoint in between.
    """
    backend = _backend.get()
    live = c.live
    key = (c.revision, backend.events.seq, live.pid if live is not None else 0,
           tuple(c.exec_ids), c.restart_count, c.state.status, c.state.pid, c.exits,
           c.name)
    slot = ("inspect", version)
    cached = c.view_cache.get(slot)
    if cached is not None and cached[0] == key:
        return cached[1]  # type: ignore[no-any-return]
    body = _encode(shapes.inspect(c, backend.images, backend.networks, version))
    c.view_cache[slot] = (key, body)
    return body


def _encode(body: Any) -> bytes:
    """JSON as pydantic-core writes it (a third of the cost of ``json.dumps``; non-ASCII
    text as UTF-8, as dockerd writes it)."""
    return pydantic_core.to_json(body) + b"\n"
