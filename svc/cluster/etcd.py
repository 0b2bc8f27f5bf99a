"""An etcd v3 client on trio: etcd's JSON gateway (``/v3/...``) through httpx.

etcd's gRPC API is also served as JSON over HTTP by every etcd since 3.3 (3.4 in Debian 12);
keys and values travel base64-encoded and 64-bit numbers as strings. httpx runs on trio, so
every call is an ordinary awaitable a cancel scope cancels: a request that caused a call and
goes away takes the call with it, and nothing is left but a closed connection.

The client knows several endpoints (the members of one etcd cluster). A call goes to the
endpoint that answered last; a transport failure tries the others in turn, and only when none
answers does the call raise ``Unavailable``. An answer of etcd's own (an error body) is an
``EtcdError`` and is not retried elsewhere: the cluster answered.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from svc.lazy import lazy_module

if TYPE_CHECKING:
    import httpx
else:
    httpx = lazy_module("httpx")

CALL_TIMEOUT = 5.0  # one request to one endpoint; a watch's read is not bounded by it
RETRY_FIRST, RETRY_MAX = 0.1, 2.0  # a patient watch's pauses while etcd is unreachable


class EtcdError(Exception):
    """etcd answered with an error (a refused request: too large, no such lease...)."""


class Unavailable(EtcdError):
    """No endpoint answered: the store is unreachable for now."""


class NotServing(EtcdError):
    """A member answered that it cannot serve now (no leader, a timeout inside the
    cluster): another member may."""


# gRPC codes etcd's gateway reports for a member that cannot serve: DeadlineExceeded,
# Unavailable
_NOT_SERVING = {4, 14}


class Compacted(EtcdError):
    """A watch asked for a revision etcd no longer keeps; the caller must read afresh."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"revision compacted; the oldest kept is {revision}")
        self.revision = revision


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    lease: int = 0

    def json(self) -> Any:
        return json.loads(self.value)


@dataclass(frozen=True)
class WatchEvent:
    kind: str  # "put" or "delete"
    kv: KeyValue
    revision: int  # the revision the event happened at


@dataclass
class Compare:
    """One comparison of a transaction: ``target`` is ``CREATE``, ``MOD``, ``VERSION`` or
    ``VALUE``; ``result`` ``EQUAL``, ``NOT_EQUAL``, ``GREATER`` or ``LESS``."""

    key: str
    target: str
    value: int | bytes
    result: str = "EQUAL"

    def body(self) -> dict[str, Any]:
        field_of = {"CREATE": "create_revision", "MOD": "mod_revision", "VERSION": "version",
                    "VALUE": "value"}[self.target]
        value = _b64(self.value) if isinstance(self.value, bytes) else str(self.value)
        return {"key": _b64(self.key), "target": self.target, "result": self.result,
                field_of: value}


@dataclass
class TxnResult:
    succeeded: bool
    revision: int
    ranges: list[list[KeyValue]] = field(default_factory=list)  # the range answers, in order


def _b64(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def prefix_end(prefix: str) -> str:
    """The range end that covers every key starting with ``prefix`` (its last byte + 1)."""
    raw = bytearray(prefix.encode())
    while raw:
        if raw[-1] < 0xFF:
            raw[-1] += 1
            return _b64(bytes(raw))
        raw.pop()
    return _b64(b"\0")


def _kv(doc: dict[str, Any]) -> KeyValue:
    return KeyValue(key=_unb64(doc.get("key")).decode(errors="replace"),
                    value=_unb64(doc.get("value")),
                    create_revision=int(doc.get("create_revision", 0)),
                    mod_revision=int(doc.get("mod_revision", 0)),
                    version=int(doc.get("version", 0)), lease=int(doc.get("lease", 0)))


def put_op(key: str, value: bytes, lease: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        body["lease"] = str(lease)
    return {"request_put": body}


def delete_op(key: str, *, prefix: bool = False) -> dict[str, Any]:
    body = {"key": _b64(key)}
    if prefix:
        body["range_end"] = prefix_end(key)
    return {"request_delete_range": body}


def range_op(key: str, *, prefix: bool = False) -> dict[str, Any]:
    body = {"key": _b64(key)}
    if prefix:
        body["range_end"] = prefix_end(key)
    return {"request_range": body}


class Etcd:
    """A client of one etcd cluster (see the module)."""

    def __init__(self, endpoints: Sequence[str], *, tls: ssl.SSLContext | None = None,
                 timeout: float = CALL_TIMEOUT) -> None:
        if not endpoints:
            raise ValueError("no etcd endpoint given")
        scheme = "https" if tls is not None else "http"
        self.urls = [f"{scheme}://{e}" for e in endpoints]
        self._next = 0
        self.timeout = timeout
        self._http = httpx.AsyncClient(verify=tls if tls is not None else False,
                                       trust_env=False, timeout=timeout)

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- calls -------------------------------------------------------------------------------

    def _order(self) -> list[str]:
        return self.urls[self._next:] + self.urls[:self._next]

    async def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``/v3/<path>`` of the first endpoint that answers."""
        failures = []
        for url in self._order():
            try:
                response = await self._http.post(f"{url}/v3/{path}", json=body)
                answer = _answer(response)
            except httpx.TransportError as exc:
                failures.append(f"{url}: {exc or type(exc).__name__}")
                continue
            except NotServing as exc:
                failures.append(f"{url}: {exc}")
                continue
            self._next = self.urls.index(url)
            return answer
        raise Unavailable("etcd unreachable: " + "; ".join(failures))

    async def get(self, key: str) -> KeyValue | None:
        doc = await self.call("kv/range", {"key": _b64(key)})
        kvs = doc.get("kvs") or []
        return _kv(kvs[0]) if kvs else None

    async def range(self, prefix: str) -> tuple[list[KeyValue], int]:
        """Every key under ``prefix`` and the store's revision at the read."""
        doc = await self.call("kv/range", {"key": _b64(prefix), "range_end": prefix_end(prefix)})
        return [_kv(k) for k in doc.get("kvs") or []], int(doc["header"]["revision"])

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        doc = await self.call("kv/put", put_op(key, value, lease)["request_put"])
        return int(doc["header"]["revision"])

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        """Remove ``key`` (or every key under it); how many went."""
        doc = await self.call("kv/deleterange", delete_op(key, prefix=prefix)
                              ["request_delete_range"])
        return int(doc.get("deleted", 0))

    async def txn(self, compare: Sequence[Compare], success: Sequence[dict[str, Any]],
                  failure: Sequence[dict[str, Any]] = ()) -> TxnResult:
        doc = await self.call("kv/txn", {"compare": [c.body() for c in compare],
                                         "success": list(success), "failure": list(failure)})
        ranges = [[_kv(k) for k in r["response_range"].get("kvs") or []]
                  for r in doc.get("responses") or [] if "response_range" in r]
        return TxnResult(bool(doc.get("succeeded")), int(doc["header"]["revision"]), ranges)

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> bool:
        """Put ``key`` only if it does not exist (compare-and-swap on its creation)."""
        result = await self.txn([Compare(key, "CREATE", 0)], [put_op(key, value, lease)])
        return result.succeeded

    async def replace(self, key: str, value: bytes, mod_revision: int, *,
                      lease: int = 0) -> bool:
        """Put ``key`` only if it was last changed at ``mod_revision``."""
        result = await self.txn([Compare(key, "MOD", mod_revision)],
                                [put_op(key, value, lease)])
        return result.succeeded

    async def delete_if(self, key: str, mod_revision: int) -> bool:
        result = await self.txn([Compare(key, "MOD", mod_revision)], [delete_op(key)])
        return result.succeeded

    # -- leases ------------------------------------------------------------------------------

    async def grant(self, ttl: int) -> int:
        doc = await self.call("lease/grant", {"TTL": str(ttl)})
        if doc.get("error"):
            raise EtcdError(str(doc["error"]))
        return int(doc["ID"])

    async def keepalive(self, lease: int) -> int:
        """Renew ``lease``; its TTL, or 0 when etcd no longer has it (expired or revoked)."""
        doc = await self.call("lease/keepalive", {"ID": str(lease)})
        result = doc.get("result") or {}
        return int(result.get("TTL", 0))

    async def revoke(self, lease: int) -> None:
        try:
            await self.call("lease/revoke", {"ID": str(lease)})
        except EtcdError as exc:
            if "not found" not in str(exc):
                raise

    # -- watches -----------------------------------------------------------------------------

    async def watch(self, prefix: str, start_revision: int, *,
                    patient: bool = True) -> AsyncIterator[WatchEvent]:
        """The changes under ``prefix`` from ``start_revision`` on, for ever. A stream that
        breaks is opened again from the revision after the last event seen (on another
        endpoint if need be), so no event is lost or repeated. While no endpoint answers,
        a ``patient`` watch keeps trying (0.1 s to 2 s apart); otherwise it raises
        ``Unavailable``. ``Compacted`` when the revision is gone. Cancel the caller's scope
        to stop: the stream's connection is closed, nothing else is left."""
        next_revision, delay = start_revision, RETRY_FIRST
        while True:
            seen = False
            try:
                async for event in self._watch_once(prefix, next_revision):
                    next_revision, seen, delay = event.revision + 1, True, RETRY_FIRST
                    yield event
            except Unavailable:
                if not patient:
                    raise
            if not seen:
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _watch_once(self, prefix: str, start: int) -> AsyncIterator[WatchEvent]:
        body = {"create_request": {"key": _b64(prefix), "range_end": prefix_end(prefix),
                                   "start_revision": str(start), "progress_notify": True}}
        failures = []
        for url in self._order():
            opened = False
            try:
                async with self._http.stream("POST", f"{url}/v3/watch", json=body,
                                             timeout=httpx.Timeout(self.timeout, read=None)
                                             ) as response:
                    if response.status_code != 200:
                        _answer(httpx.Response(response.status_code,
                                               content=await response.aread()))
                    opened = True
                    self._next = self.urls.index(url)
                    async for line in response.aiter_lines():
                        for event in _watch_events(line):
                            yield event
                return  # the stream ended: the caller opens it again
            except (httpx.TransportError, NotServing) as exc:
                if opened:
                    return  # it broke after it was open: the caller opens it again
                failures.append(f"{url}: {exc or type(exc).__name__}")
        raise Unavailable("etcd unreachable: " + "; ".join(failures))


def _watch_events(line: str) -> list[WatchEvent]:
    if not line.strip():
        return []
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise EtcdError(f"etcd's watch sent something that is not JSON: {exc}") from None
    if "error" in doc:
        raise EtcdError(str(doc["error"].get("message") or doc["error"]))
    result = doc.get("result") or {}
    if result.get("compact_revision") and result.get("canceled"):
        raise Compacted(int(result["compact_revision"]))
    if result.get("canceled"):
        raise EtcdError(f"watch canceled: {result.get('cancel_reason') or 'no reason given'}")
    out = []
    for e in result.get("events") or []:
        kv = _kv(e.get("kv") or {})
        out.append(WatchEvent("delete" if e.get("type") == "DELETE" else "put", kv,
                              kv.mod_revision))
    return out


def _answer(response: httpx.Response) -> dict[str, Any]:
    try:
        doc = response.json()
    except ValueError:
        raise EtcdError(f"etcd answered {response.status_code} with no JSON") from None
    if response.status_code != 200 or not isinstance(doc, dict):
        message = doc.get("message") or doc.get("error") if isinstance(doc, dict) else doc
        code = doc.get("code") if isinstance(doc, dict) else None
        if response.status_code == 503 or code in _NOT_SERVING:
            raise NotServing(f"etcd cannot serve: {message}")
        raise EtcdError(f"etcd refused the request: {message}")
    return doc
