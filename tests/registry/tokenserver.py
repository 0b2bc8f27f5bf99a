"""A token server for distribution's ``token`` auth: ES256 JWTs with an ``x5c`` header.

The registry trusts the self-signed certificate written to ``cert_path`` (its
``rootcertbundle``). Policy: ``alice``/``secret`` gets every action she asks for; anonymous
callers get ``pull`` on repositories under ``public/``; a wrong password is a 401 with
``{"details": "incorrect username or password"}``. ``GET`` with ``offline_token=true`` also
returns a refresh token, which ``POST`` (``grant_type=refresh_token``) accepts. Every request
is recorded in ``requests`` so tests can count token fetches.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

SERVICE = "test-registry"
ISSUER = "svc-test-issuer"
USERS = {"alice": "secret"}
REFRESH = {"idtoken-alice": "alice"}


class TokenServer:
    def __init__(self, cert_path: Path) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "svc test token issuer")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .sign(self.key, hashes.SHA256()))
        self.cert_path = cert_path
        cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.x5c = base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()
        self.expires_in = 300
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                query = parse_qs(urlsplit(self.path).query)
                server.record("GET", query)
                user = server.basic_user(self.headers.get("Authorization", ""))
                if user is False:
                    return self.reply(401, {"details": "incorrect username or password"})
                offline = query.get("offline_token") == ["true"] and bool(user)
                self.reply(200, server.issue(user or "", query, offline=offline))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                form = parse_qs(self.rfile.read(length).decode())
                server.record("POST", form)
                user = REFRESH.get(form.get("refresh_token", [""])[0])
                if form.get("grant_type") != ["refresh_token"] or user is None:
                    return self.reply(401, {"error": "invalid_grant",
                                            "error_description": "refresh token refused"})
                scopes = form.get("scope", [""])[0].split()
                self.reply(200, server.issue(user, {**form, "scope": scopes}))

            def reply(self, status: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> TokenServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def record(self, method: str, query: dict[str, list[str]]) -> None:
        with self.lock:
            self.requests.append((method, query))

    def fetches(self, scope: str | None = None) -> int:
        with self.lock:
            return sum(1 for _, q in self.requests if scope is None or scope in q.get("scope", []))

    @staticmethod
    def basic_user(header: str) -> str | bool | None:
        """The user, None for anonymous, False for a wrong password."""
        if not header.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        return user if USERS.get(user) == password else False

    def issue(self, user: str, query: dict[str, list[str]], *, offline: bool = False
              ) -> dict[str, Any]:
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            wanted = actions.split(",")
            granted = wanted if user else [a for a in wanted if a == "pull"
                                           and name.startswith("public/")]
            if granted:
                access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        claims = {"iss": ISSUER, "sub": user, "aud": query.get("service", [SERVICE])[0],
                  "exp": now + self.expires_in, "nbf": now - 10, "iat": now,
                  "jti": uuid.uuid4().hex, "access": access}
        token = jwt.encode(claims, self.key, algorithm="ES256", headers={"x5c": [self.x5c]})
        doc: dict[str, Any] = {"token": token, "access_token": token,
                               "expires_in": self.expires_in}
        if offline:
            doc["refresh_token"] = "idtoken-" + user
        return doc

    def registry_auth(self) -> str:
        """The registry's ``auth:`` section for this server."""
        return (f"  token:\n    realm: {self.realm}\n    service: {SERVICE}\n"
                f"    issuer: {ISSUER}\n    rootcertbundle: {self.cert_path}")
