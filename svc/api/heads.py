"""The headers every response carries, and whole response heads for views that write their
own (streams taken over from hypercorn)."""

from __future__ import annotations

from quart import current_app

from svc.version import API_VERSION_STR, SERVER_HEADER

CORS_ALLOW_HEADERS = "Origin, X-Requested-With, Content-Type, Accept, X-Registry-Auth"
CORS_ALLOW_METHODS = "HEAD, GET, POST, DELETE, PUT, OPTIONS"


def common_headers(cors_origin: str = "") -> list[tuple[str, str]]:
    """The headers every response carries (and that views writing their own head add)."""
    out = [("Api-Version", API_VERSION_STR), ("Server", SERVER_HEADER), ("Ostype", "linux"),
           ("Docker-Experimental", "false")]
    if cors_origin:
        out += [("Access-Control-Allow-Origin", cors_origin),
                ("Access-Control-Allow-Headers", CORS_ALLOW_HEADERS),
                ("Access-Control-Allow-Methods", CORS_ALLOW_METHODS)]
    return out


def response_head(status: str, headers: list[tuple[str, str]]) -> bytes:
    """An HTTP/1.1 response head with the common headers, for views that take over."""
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers),
             *(f"{k}: {v}" for k, v in current_app.config["SVC_COMMON_HEADERS"])]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


# -- the raw-stream head of a hijacked connection (attach, exec start) ------------------------

RAW_STREAM = "application/vnd.svc.raw-stream"


def wants_upgrade(headers: list[tuple[bytes, bytes]]) -> bool:
    connection = upgrade = ""
    for name, value in headers:
        low = name.lower()
        if low == b"connection":
            connection += "," + value.decode("latin1").lower()
        elif low == b"upgrade":
            upgrade = value.decode("latin1").strip().lower()
    tokens = {t.strip() for t in connection.split(",")}
    return "upgrade" in tokens and upgrade == "tcp"


def raw_stream_head(upgrade: bool) -> bytes:
    if upgrade:
        return (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: " + RAW_STREAM.encode()
                + b"\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
    return b"HTTP/1.1 200 OK\r\nContent-Type: " + RAW_STREAM.encode() + b"\r\n\r\n"
