"""The request fuzzer shared by the fuzz test and the ``fuzz_rss`` benchmark.

Bodies are generated from the JSON schemas of svc's pydantic wire models (every model, on every
endpoint that takes a body), with field names in every case Go's decoder would match, values at
and beyond the bounds, wrong types, long and odd strings; query parameters from the Engine API's
names; path parameters from live objects and junk. The seed is fixed (``SVC_FUZZ_SEED`` picks
another) so that a failure can be replayed.

Nothing reaches beyond the machine: routes and parameters that make the daemon contact a
registry or download a URL are left out, and generated subnets are drawn from the test range.
"""

from __future__ import annotations

import inspect
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import httpx
import pydantic
import trio

from tests.conftest import http_client
from tests.support import images as timg

SEED = int(os.environ.get("SVC_FUZZ_SEED", "20261124"))
REQUESTS = int(os.environ.get("SVC_FUZZ_REQUESTS", "4000"))
WORKERS = 6
ANSWER_WITHIN = 20.0

STRINGS = ["", "a", "busybox", "true", "0", "-1", "1", "x" * 3000, "..", "/", "../../etc",
           "/tmp", "\x00", "a\x00b", "é☃", "%00", "{}", "[]", "null", " ", "\n", "TRUE",
           "sh", "-c", "tcp", "80/tcp", "8080", "127.0.0.1", "::1", "fe80::1%eth0",
           "10.253.0.0/24", "10.253.9.0/24", "10.253.0.1", "bridge", "host", "none",
           "container:nope", "json-file", "none", "always", "on-failure", "SIGKILL", "9",
           "rw", "ro", "z", "/x:/y", "vol:/data", "/:/host:ro", "label=x", "a=b", "="]
INTS = [0, 1, -1, 2, 3, 4 << 20, 2**31 - 1, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 1000,
        100001]
QUERY = {"all": None, "limit": None, "size": None, "filters": None, "since": None,
         "before": None, "force": None, "v": None, "link": None, "t": ["0", "1", "x", ""],
         "signal": ["SIGUSR1", "0", "999", "KILL", "x"], "stdout": None, "stderr": None,
         "stream": None, "logs": None, "stdin": None, "detachKeys": None, "follow": None,
         "timestamps": None, "tail": None, "ps_args": None, "h": None, "w": None,
         "path": None, "noOverwriteDirNonDir": None, "name": None, "container": None,
         "repo": None, "tag": None, "comment": None, "author": None, "pause": None,
         "changes": None, "fromSrc": ["-", "", "x"], "noprune": None, "digests": None,
         "filter": None, "names": None, "until": None, "condition": None, "dangling": None}
QUERY_VALUES = ["1", "0", "true", "false", "x", "", "-1", "99999999999999999999999",
                '{"label":["a"]}', '{"status":["running"]}', "[]", "{", "/", "/etc/passwd",
                "..", "10", "1e9", "\x00", "a" * 5000]
SKIP_ROUTES = re.compile(r"^/(auth|build|images/search|images/<[^>]+>/push)$|probe-echo")
STREAMING = re.compile(r"/(attach|events|logs|stats|wait|get|export|archive|start|copy)")


def _models() -> list[type[pydantic.BaseModel]]:
    found: dict[str, type[pydantic.BaseModel]] = {}
    for mod_name in ("base", "containers", "events", "execs", "images", "networks", "system",
                     "volumes"):
        mod = __import__(f"svc.models.{mod_name}", fromlist=["x"])
        for obj in vars(mod).values():
            if inspect.isclass(obj) and issubclass(obj, pydantic.BaseModel) \
                    and obj.__module__ == mod.__name__:
                found[obj.__name__] = obj
    return list(found.values())


def _case(name: str, rng: random.Random) -> str:
    """A field name as some client might spell it; Go matches them all."""
    return rng.choice([name, name, name.lower(), name.upper(), name[:1].lower() + name[1:]])


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def value(self, schema: dict[str, Any], defs: dict[str, Any], depth: int = 0,
              key: str = "") -> Any:
        rng = self.rng
        if rng.random() < 0.06:  # the wrong type, now and then
            return rng.choice([None, 1, "x", [], {}, True, -1.5, [[["deep"]]]])
        if "$ref" in schema:
            return self.value(defs[schema["$ref"].split("/")[-1]], defs, depth, key)
        for combo in ("anyOf", "oneOf", "allOf"):
            if combo in schema:
                return self.value(rng.choice(schema[combo]), defs, depth, key)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            return self.obj(schema, defs, depth)
        if kind == "array":
            n = 0 if depth > 3 else rng.choice([0, 1, 1, 2, 5])
            return [self.value(schema.get("items", {}), defs, depth + 1, key) for _ in range(n)]
        if kind == "integer" or kind == "number":
            return rng.choice(INTS)
        if kind == "boolean":
            return rng.choice([True, False])
        if kind == "null":
            return None
        return self.string(key)

    def string(self, key: str) -> str:
        if key in ("Subnet", "IPRange") and self.rng.random() < 0.7:
            return f"10.253.{self.rng.randint(0, 255)}.0/24"
        return self.rng.choice(STRINGS)

    def obj(self, schema: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
        props = schema.get("properties")
        if props is None or depth > 4:
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict) and depth <= 4:
                return {self.rng.choice(STRINGS): self.value(extra, defs, depth + 1)
                        for _ in range(self.rng.choice([0, 1, 2]))}
            return {}
        names = list(props)
        picked = self.rng.sample(names, k=min(len(names), self.rng.randint(0, 8)))
        out: dict[str, Any] = {}
        for name in picked:
            out[_case(name, self.rng)] = self.value(props[name], defs, depth + 1, name)
        return out


def _schemas() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    out = []
    for model in _models():
        try:
            schema = model.model_json_schema(by_alias=True)
        except Exception:  # a model that has no JSON schema (a custom type) is skipped
            continue
        out.append((schema, schema.get("$defs", {})))
    return out


def _body(gen: Gen, schemas: list[tuple[dict[str, Any], dict[str, Any]]],
          image: str) -> tuple[bytes, str]:
    rng = gen.rng
    roll = rng.random()
    if roll < 0.06:
        return rng.randbytes(rng.choice([1, 16, 4096])), "application/json"
    if roll < 0.10:
        return b"[" * 5000 + b"]" * 5000, "application/json"
    if roll < 0.13:
        return b'{"Memory": 1' + b"0" * 6000 + b"}", "application/json"
    if roll < 0.16:
        return b"{}", rng.choice(["text/plain", "", "application/x-tar"])
    schema, defs = rng.choice(schemas)
    doc = gen.obj(schema, defs, 0)
    if isinstance(doc, dict) and rng.random() < 0.5:
        doc.setdefault("Image", image)
    return json.dumps(doc).encode(), "application/json"


POOLS = {"containers": "containers", "exec": "execs", "images": "images",
         "networks": "networks", "volumes": "volumes"}


def _fill(rule: str, ids: dict[str, list[str]], rng: random.Random) -> str:
    """Path parameters from the live objects of the route's kind (a quarter of them junk)."""
    pool = ids.get(POOLS.get(rule.strip("/").split("/")[0], ""), [])

    def one(m: re.Match[str]) -> str:
        if rng.random() < 0.25 or not pool:
            return rng.choice(["nope", "..", "%2e%2e", "a" * 300, "0", "-", "%00", "x:y"])
        return rng.choice(pool)
    return re.sub(r"<([^>]+)>", one, rule)


def _query(rng: random.Random) -> dict[str, str]:
    out = {}
    for name in rng.sample(list(QUERY), k=rng.randint(0, 4)):
        values = QUERY[name] or QUERY_VALUES
        out[name] = rng.choice(values)
    return out


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def setup_objects(c: httpx.AsyncClient) -> dict[str, list[str]]:
    await timg.import_busybox(c)
    running = (await c.post("/containers/create", json={
        "Image": "busybox", "OpenStdin": True,  # stops at once (restart waits for the stop)
        "Cmd": ["sh", "-c", "trap 'exit 0' TERM; sleep 600 & wait"]})).json()["Id"]
    assert (await c.post(f"/containers/{running}/start")).status_code == 204
    exited = (await c.post("/containers/create", json={"Image": "busybox",
                                                       "Cmd": ["true"]})).json()["Id"]
    exec_id = (await c.post(f"/containers/{running}/exec",
                            json={"Cmd": ["true"]})).json()["Id"]
    net = (await c.post("/networks/create", json={
        "Name": "fuzznet", "IPAM": {"Config": [{"Subnet": "10.253.250.0/24"}]}})).json()["Id"]
    assert (await c.post("/volumes/create", json={"Name": "fuzzvol"})).status_code == 201
    return {"containers": [running, exited, running[:12], "/nope"], "execs": [exec_id],
            "images": ["busybox", "busybox:latest", "docker.io/library/busybox"],
            "networks": [net, "fuzznet", "bridge", "none"], "volumes": ["fuzzvol"]}


def _learn(ids: dict[str, list[str]], path: str, text: str) -> None:
    """Objects the fuzz itself made become targets of later requests."""
    kind = POOLS.get(path.strip("/").split("/")[0], "")
    if kind not in ("containers", "networks", "volumes"):
        return
    try:
        doc = json.loads(text)
    except ValueError:
        return
    if isinstance(doc, dict):
        made = doc.get("Id") or doc.get("Name")
        if isinstance(made, str):
            ids[kind].append(made)


async def _send(c: httpx.AsyncClient, method: str, path: str, params: dict[str, str],
                body: bytes | None, ctype: str) -> tuple[int, str]:
    headers = {"Content-Type": ctype} if body is not None else {}
    with trio.fail_after(ANSWER_WITHIN):
        async with c.stream(method, path, params=params, content=body,
                            headers=headers) as resp:
            text = ""
            if not STREAMING.search(path) and resp.status_code != 101:
                text = (await resp.aread()).decode(errors="replace")
            return resp.status_code, text


async def routes(c: httpx.AsyncClient) -> list[dict[str, Any]]:
    """The daemon's routes (from the probe) that the fuzz may call."""
    return [r for r in (await c.get("/_probe/routes")).json()
            if not SKIP_ROUTES.search(r["rule"]) and r["methods"]]


async def fuzz_requests(sock: Path, ids: dict[str, list[str]], routes: list[dict[str, Any]],
                        requests: int = REQUESTS) -> list[tuple[int, str, str]]:
    """Send ``requests`` generated requests over six connections; the failures: (status, or
    -1 for no answer in time and -2 for a dropped connection, request, detail)."""
    rng = random.Random(SEED)
    schemas = _schemas()
    plan = []
    for _ in range(requests):
        route = rng.choice(routes)
        method = rng.choice(route["methods"])
        gen = Gen(random.Random(rng.random()))
        body, ctype = _body(gen, schemas, "busybox") if method in ("POST", "PUT") \
            else (None, "")
        plan.append((method, route["rule"], random.Random(rng.random()), _query(rng), body,
                     ctype))
    bad: list[tuple[int, str, str]] = []
    seen: dict[int, int] = {}

    async def worker(items: list[Any]) -> None:
        async with http_client(sock) as c:
            c.timeout = httpx.Timeout(ANSWER_WITHIN)
            for method, rule, path_rng, params, body, ctype in items:
                path = _fill(rule, ids, path_rng)
                try:
                    status, text = await _send(c, method, path, params, body, ctype)
                except (trio.TooSlowError, httpx.TimeoutException):
                    bad.append((-1, f"{method} {path}", json.dumps(params)[:200]))
                    continue
                except httpx.TransportError as exc:
                    bad.append((-2, f"{method} {path}", f"{exc!r}"[:200]))
                    continue
                seen[status] = seen.get(status, 0) + 1
                if status == 201:
                    _learn(ids, path, text)
                if status >= 500:
                    bad.append((status, f"{method} {path}", json.dumps(params)[:200]))

    async with trio.open_nursery() as n:
        for w in range(WORKERS):
            n.start_soon(worker, plan[w::WORKERS])
    print("statuses:", dict(sorted(seen.items())))
    return bad


