"""Schema 1 manifests for the tests, signed as libtrust signs them (``prettyjws``, ES256)."""

from __future__ import annotations

import base64
import hashlib
import json

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def v1_id(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


def history_docs(n: int) -> list[str]:
    """v1Compatibility documents newest first; entry i's parent is entry i+1."""
    docs = []
    for i in range(n):
        doc: dict[str, object] = {"id": v1_id(i), "created": f"2016-06-0{i + 1}T10:00:00.5Z",
                                  "container_config": {"Cmd": ["/bin/sh", "-c", f"step {i}"]}}
        if i + 1 < n:
            doc["parent"] = v1_id(i + 1)
        docs.append(json.dumps(doc))
    return docs


def _key_id(key: ec.EllipticCurvePublicKey) -> str:
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    encoded = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(encoded[i:i + 4] for i in range(0, 48, 4))


def signed(name: str, tag: str, blob_sums: list[str], history: list[str]) -> bytes:
    """A signed schema 1 manifest: payload indented by 3, ``signatures`` spliced before the
    closing brace, protected header naming ``formatLength``/``formatTail``."""
    doc = {"schemaVersion": 1, "name": name, "tag": tag, "architecture": "amd64",
           "fsLayers": [{"blobSum": b} for b in blob_sums],
           "history": [{"v1Compatibility": h} for h in history]}
    payload = json.dumps(doc, indent=3).encode()
    length = payload.rindex(b"\n}")
    protected = b64url(json.dumps({"formatLength": length,
                                   "formatTail": b64url(payload[length:]),
                                   "time": "2016-06-01T10:00:00Z"}).encode())
    key = ec.generate_private_key(ec.SECP256R1())
    der = key.sign(f"{protected}.{b64url(payload)}".encode(), ec.ECDSA(hashes.SHA256()))
    r, s = decode_dss_signature(der)
    numbers = key.public_key().public_numbers()
    jwk = {"crv": "P-256", "kid": _key_id(key.public_key()), "kty": "EC",
           "x": b64url(numbers.x.to_bytes(32, "big")), "y": b64url(numbers.y.to_bytes(32, "big"))}
    signatures = [{"header": {"jwk": jwk, "alg": "ES256"},
                   "signature": b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big")),
                   "protected": protected}]
    sig_text = json.dumps(signatures, indent=3).replace("\n", "\n   ")
    return payload[:length] + b',\n   "signatures": ' + sig_text.encode() + b"\n}"


def payload_of(raw: bytes) -> bytes:
    """The unsigned document a signed one was made from (for checking the digest)."""
    doc = json.loads(raw)
    del doc["signatures"]
    return json.dumps(doc, indent=3).encode()
