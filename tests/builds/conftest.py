"""A daemon with a busybox image for the build tests, helpers that make contexts and read
build streams; each test's containers and the images it tagged are removed after it."""

from __future__ import annotations

import http.server
import io
import json
import tarfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import http_client
from tests.runtime.conftest import skip_reason
from tests.support import images as timg
from tests.support.daemon import Daemon, with_busybox

BASE = "busybox:latest"


@pytest.fixture(scope="module")
def bdaemon() -> Iterator[Daemon]:
    if reason := skip_reason():
        pytest.skip(reason)
    with with_busybox() as d:
        yield d


@pytest.fixture
async def api(bdaemon: Daemon) -> AsyncIterator[httpx.AsyncClient]:
    async with http_client(bdaemon.sock) as c:
        c.timeout = httpx.Timeout(120)
        yield c
        for item in (await c.get("/containers/json", params={"all": "1"})).json():
            await c.delete(f"/containers/{item['Id']}", params={"force": "1"})


def context_tar(files: dict[str, bytes | str], *, mode: int = 0o644) -> bytes:
    """A context archive of ``files`` (name -> content; a name ending in / is a directory)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime = timg.FIXED_MTIME
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            raw = data.encode() if isinstance(data, str) else data
            info.size, info.mode = len(raw), mode
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def stream_text(msgs: list[dict[str, Any]]) -> str:
    return "".join(m.get("stream", "") for m in msgs)


async def build(c: httpx.AsyncClient, files: dict[str, bytes | str] | bytes,
                **params: Any) -> list[dict[str, Any]]:
    """POST /build; the stream's messages (HTTP 200 asserted)."""
    body = files if isinstance(files, bytes) else context_tar(files)
    r = await c.post("/build", params=params, content=body,
                     headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 200, r.text
    return messages(r.text)


async def refused(c: httpx.AsyncClient, files: dict[str, bytes | str] | bytes,
                  **params: Any) -> str:
    """POST /build that fails before the stream: the 400's message."""
    body = files if isinstance(files, bytes) else context_tar(files)
    r = await c.post("/v1.23/build", params=params, content=body,
                     headers={"Content-Type": "application/x-tar"})
    assert r.status_code == 400, r.text
    return r.text.strip()


def built_id(msgs: list[dict[str, Any]]) -> str:
    """The image id of a successful build (from its aux message)."""
    errors = [m for m in msgs if "error" in m]
    assert not errors, stream_text(msgs) + json.dumps(errors)
    return next(m["aux"]["ID"] for m in msgs if "aux" in m)


@pytest.fixture
def web(tmp_path: Path) -> Iterator[str]:
    """A web server on loopback serving ``tmp_path`` (with ``served.txt``)."""
    (tmp_path / "served.txt").write_text("over http\n")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a: object, **kw: object) -> None:
            super().__init__(*a, directory=str(tmp_path), **kw)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
