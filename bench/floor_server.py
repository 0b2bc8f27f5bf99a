"""The floor of this stack: a bare trio unix-socket server that answers fixed response bytes.

It reads each request head (up to the blank line; GET requests, so there is no body), looks the
path up in a table of complete responses captured from svcd (status line, headers with
Content-Length, body) and writes that response back, keeping the connection alive. No HTTP
library, no routing, no per-request objects: what remains is trio's socket I/O and one Python
loop per connection. Pipelined requests are answered in one write.

    python -m bench.floor_server --socket PATH --responses FILE

FILE is JSON mapping a request path to a base64 response; unknown paths get the first entry.
SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
from pathlib import Path

import trio

MAX_HEAD = 64 * 1024


def load_responses(path: Path) -> dict[bytes, bytes]:
    table = json.loads(path.read_text())
    return {p.encode(): base64.b64decode(r) for p, r in table.items()}


def answers(buf: bytearray, responses: dict[bytes, bytes], default: bytes) -> bytes:
    """Consume every complete request head in ``buf``; return the responses, concatenated."""
    out = []
    while (end := buf.find(b"\r\n\r\n")) >= 0:
        request_line = bytes(buf[: buf.find(b"\r\n")])
        del buf[: end + 4]
        parts = request_line.split(b" ")
        target = parts[1].partition(b"?")[0] if len(parts) > 1 else b""
        out.append(responses.get(target, default))
    return b"".join(out)


async def handle(stream: trio.SocketStream, responses: dict[bytes, bytes],
                 default: bytes) -> None:
    buf = bytearray()
    try:
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            buf += data
            reply = answers(buf, responses, default)
            if reply:
                await stream.send_all(reply)
            elif len(buf) > MAX_HEAD:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        await stream.aclose()


async def serve(sock_path: Path, responses: dict[bytes, bytes]) -> None:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(str(sock_path))
    sock.listen(1024)
    listener = trio.SocketListener(sock)
    default = next(iter(responses.values()))

    async def handler(stream: trio.SocketStream) -> None:
        await handle(stream, responses, default)

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.serve_listeners, handler, [listener])
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--socket", type=Path, required=True)
    p.add_argument("--responses", type=Path, required=True)
    args = p.parse_args()
    try:
        trio.run(serve, args.socket, load_responses(args.responses))
    finally:
        if args.socket.exists():
            os.unlink(args.socket)


if __name__ == "__main__":
    main()
