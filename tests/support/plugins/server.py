"""A plugin process: HTTP/1.1 on a unix socket or TCP, ``POST /<Method>`` with JSON.

``python -m tests.support.plugins.server --impl volume --state DIR (--socket PATH | --tcp
HOST:PORT) [--tls-cert C --tls-key K] [--arg KEY=VALUE ...]``

- ``/Plugin.Activate`` answers ``{"Implements": <the impl's IMPLEMENTS>}``;
- every other method goes to the impl's handler (``make(state, args)`` returns a dict of
  method -> function(body) -> (status, answer object)); an unknown method is a 404 with Go's
  text ("404 page not found"), as a Go plugin's mux answered;
- each request is appended to ``<state>/calls.jsonl`` (method, body, headers) before it is
  answered, so a test reads what the daemon asked and in which order (``--arg record=0``: not,
  for a benchmark);
- ``<state>/faults.json`` (read at each request) maps a method to a fault: ``"hang"`` (never
  answers), ``"crash"`` (the process exits at once, mid-call), ``"garbage"`` (a 200 that is not
  JSON), ``"slow:<seconds>"`` (answers after that long).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import socket
import socketserver
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

Handler = Any


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class _TCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(impl: str, state: Path, args: dict[str, str], *, sock: str = "", tcp: str = "",
          cert: str = "", key: str = "") -> None:
    mod = importlib.import_module(f"tests.support.plugins.{impl}")
    handlers = mod.make(state, args)
    implements = (args["implements"].split(",") if "implements" in args
                  else list(mod.IMPLEMENTS))
    lock = threading.Lock()
    calls = state / "calls.jsonl"
    record = args.get("record", "1") != "0"

    class Request(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:  # noqa: A002
            pass

        def address_string(self) -> str:
            return "plugin-client"

        def do_POST(self) -> None:  # noqa: N802
            method = self.path.lstrip("/")
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            if record:
                with lock, calls.open("a") as f:
                    f.write(json.dumps({"method": method, "body": body, "time": time.time(),
                                        "headers": dict(self.headers.items())}) + "\n")
                    f.flush()
            fault = _faults(state).get(method, "")
            if fault == "hang":
                time.sleep(3600)
            if fault == "crash":
                os._exit(3)
            if fault.startswith("slow:"):
                time.sleep(float(fault[5:]))
            if fault == "garbage":
                return self._send(200, b"<html>this is not json", "text/html")
            if method == "Plugin.Activate":
                return self._json(200, {"Implements": implements})
            fn = handlers.get(method)
            if fn is None:
                return self._send(404, b"404 page not found\n", "text/plain; charset=utf-8")
            try:
                status, answer = fn(body or {})
            except Exception as exc:  # a bug of the test plugin: say so to the daemon
                status, answer = 500, {"Err": f"test plugin error: {exc!r}"}
            self._json(status, answer)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode(),
                       "application/vnd.docker.plugins.v1.2+json")

        def _send(self, status: int, data: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server: socketserver.BaseServer
    if sock:
        with_suffix = Path(sock)
        with_suffix.parent.mkdir(parents=True, exist_ok=True)
        if with_suffix.exists():
            with_suffix.unlink()
        server = _Unix(sock, Request)
    else:
        host, _, port = tcp.rpartition(":")
        server = _TCP((host, int(port)), Request)
        if cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
    (state / "ready").write_text(str(os.getpid()))
    server.serve_forever()


def _faults(state: Path) -> dict[str, str]:
    try:
        return dict(json.loads((state / "faults.json").read_text()))
    except (OSError, ValueError):
        return {}


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--impl", required=True)
    p.add_argument("--state", required=True, type=Path)
    p.add_argument("--socket", default="")
    p.add_argument("--tcp", default="")
    p.add_argument("--tls-cert", default="")
    p.add_argument("--tls-key", default="")
    p.add_argument("--arg", action="append", default=[])
    ns = p.parse_args(argv)
    ns.state.mkdir(parents=True, exist_ok=True)
    args = dict(a.split("=", 1) for a in ns.arg)
    socket.setdefaulttimeout(None)
    serve(ns.impl, ns.state, args, sock=ns.socket, tcp=ns.tcp, cert=ns.tls_cert,
          key=ns.tls_key)


if __name__ == "__main__":
    main(sys.argv[1:])
