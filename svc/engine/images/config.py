"""Image config documents: building them (import, legacy load), reading them, ``changes``.

An image config is the JSON whose sha256 is the image id. svc writes it compactly with the
keys in dockerd's order, so configs it makes look like the ones users know.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from svc.engine.networks.ports import parse_port
from svc.errors import InvalidParameter
from svc.version import SVC_VERSION
from svc.wire.timefmt import rfc3339_nano

CONFIG_KEYS = ("Hostname", "Domainname", "User", "AttachStdin", "AttachStdout", "AttachStderr",
               "Tty", "OpenStdin", "StdinOnce", "Env", "Cmd", "Image", "Volumes", "WorkingDir",
               "Entrypoint", "OnBuild", "Labels")
_BOOLS = {"AttachStdin", "AttachStdout", "AttachStderr", "Tty", "OpenStdin", "StdinOnce"}
_STRINGS = {"Hostname", "Domainname", "User", "Image", "WorkingDir"}

# The instructions ``docker import --change`` accepts (dockerd 1.10).
CHANGE_COMMANDS = ("CMD", "ENTRYPOINT", "ENV", "EXPOSE", "LABEL", "ONBUILD", "USER", "VOLUME",
                   "WORKDIR", "STOPSIGNAL")


def empty_container_config() -> dict[str, Any]:
    """A container configuration with every field present, as dockerd writes it."""
    return {k: (False if k in _BOOLS else "" if k in _STRINGS else None) for k in CONFIG_KEYS}


def normalize_container_config(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every standard field present (missing ones empty), extra fields kept after them."""
    out = empty_container_config()
    for k, v in (raw or {}).items():
        out[k] = v
    return out


def encode_config(config: Mapping[str, Any]) -> bytes:
    return json.dumps(config, separators=(",", ":")).encode()


def import_config(diff_id: str, *, created_ns: int, changes: Iterable[str] = (),
                  comment: str = "Imported from -") -> bytes:
    """The config of an image imported from a rootfs tarball (one layer, no parent)."""
    cfg = apply_changes(empty_container_config(), changes)
    created = rfc3339_nano(created_ns)
    doc = {"architecture": "amd64", "comment": comment, "config": cfg,
           "container_config": empty_container_config(), "created": created,
           "docker_version": f"svc-{SVC_VERSION}",
           "history": [{"created": created, "comment": comment}],
           "os": "linux", "rootfs": {"type": "layers", "diff_ids": [diff_id]}}
    return encode_config(doc)


def _json_or_shell(rest: str, *, shell: bool) -> list[str]:
    rest = rest.strip()
    if rest.startswith("["):
        try:
            value = json.loads(rest)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
    return ["/bin/sh", "-c", rest] if shell else rest.split()


def _pairs(rest: str, command: str) -> dict[str, str]:
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise InvalidParameter(f"{command}: {exc}") from None
    if not words:
        raise InvalidParameter(f"{command} requires at least one argument")
    if "=" not in words[0]:  # the old "ENV key value with spaces" form
        if len(words) < 2:
            raise InvalidParameter(f"{command} {words[0]} needs a value")
        return {words[0]: rest.strip()[len(words[0]):].strip()}
    out = {}
    for w in words:
        key, eq, value = w.partition("=")
        if not eq or not key:
            raise InvalidParameter(f"{command}: {w!r} is not of the form key=value")
        out[key] = value
    return out


def apply_changes(config: dict[str, Any], changes: Iterable[str]) -> dict[str, Any]:
    """Apply Dockerfile-style instructions (``docker import --change``) to a config."""
    for line in changes:
        line = line.strip()
        if not line:
            continue
        command, _, rest = line.partition(" ")
        command = command.upper()
        if command not in CHANGE_COMMANDS:
            raise InvalidParameter(f"{command} is not a valid change command")
        if command in ("CMD", "ENTRYPOINT"):
            config["Cmd" if command == "CMD" else "Entrypoint"] = _json_or_shell(rest, shell=True)
        elif command == "ENV":
            env = [e for e in (config.get("Env") or [])]
            for k, v in _pairs(rest, command).items():
                env = [e for e in env if e.split("=", 1)[0] != k] + [f"{k}={v}"]
            config["Env"] = env
        elif command == "LABEL":
            config["Labels"] = {**(config.get("Labels") or {}), **_pairs(rest, command)}
        elif command == "EXPOSE":
            ports = dict(config.get("ExposedPorts") or {})
            for p in rest.split():
                try:
                    port, proto = parse_port(p)
                except InvalidParameter:
                    raise InvalidParameter(f"EXPOSE: invalid port {p!r}") from None
                ports[f"{port}/{proto}"] = {}
            config["ExposedPorts"] = ports
        elif command == "VOLUME":
            vols = dict(config.get("Volumes") or {})
            for v in _json_or_shell(rest, shell=False):
                vols[v] = {}
            config["Volumes"] = vols
        elif command == "ONBUILD":
            config["OnBuild"] = [*(config.get("OnBuild") or []), rest.strip()]
        elif command == "STOPSIGNAL":
            config["StopSignal"] = rest.strip()
        else:  # USER, WORKDIR
            if not rest.strip():
                raise InvalidParameter(f"{command} requires an argument")
            config["User" if command == "USER" else "WorkingDir"] = rest.strip()
    return config


def legacy_config(layers: list[Mapping[str, Any]], diff_ids: list[str]) -> bytes:
    """An image config made from a legacy save's per-layer json files (bottom first).

    As dockerd does for v1 images: the top layer's json supplies the config, each layer
    becomes one history entry, and the rootfs lists the layers' diff ids.
    """
    top = dict(layers[-1])
    history = []
    for layer in layers:
        cc = layer.get("container_config") or {}
        cmd = cc.get("Cmd") if isinstance(cc, dict) else None
        entry: dict[str, Any] = {"created": layer.get("created") or "1970-01-01T00:00:00Z"}
        if layer.get("author"):
            entry["author"] = layer["author"]
        if isinstance(cmd, list) and cmd:
            entry["created_by"] = " ".join(str(c) for c in cmd)
        if layer.get("comment"):
            entry["comment"] = layer["comment"]
        history.append(entry)
    doc: dict[str, Any] = {}
    for key in ("architecture", "author", "comment", "config", "container", "container_config",
                "created", "docker_version", "os"):
        if key in top and top[key] not in (None, ""):
            doc[key] = top[key]
    doc.setdefault("architecture", "amd64")
    doc.setdefault("os", "linux")
    doc["config"] = normalize_container_config(doc.get("config"))
    doc["history"] = history
    doc["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
    return encode_config(doc)


def diff_ids_of(config: Mapping[str, Any]) -> list[str]:
    rootfs = config.get("rootfs")
    if not isinstance(rootfs, dict) or rootfs.get("type") != "layers":
        raise InvalidParameter("invalid image config: rootfs must be of type layers")
    ids = rootfs.get("diff_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) and i.startswith("sha256:")
                                            for i in ids):
        raise InvalidParameter("invalid image config: rootfs.diff_ids must be sha256 digests")
    return list(ids)


def commit_config(image: Mapping[str, Any], container_config: Mapping[str, Any], *,
                  container_id: str, diff_id: str, created_ns: int, comment: str, author: str,
                  changes: Iterable[str], overrides: Mapping[str, Any] | None,
                  empty_layer: bool) -> bytes:
    """The config of ``docker commit``: the container's configuration (with ``overrides``
    from the request body, then the ``changes`` instructions) over the image's history and
    layers plus the new one (moby ``daemon.Commit``)."""
    cfg = normalize_container_config(container_config)
    for key, value in (overrides or {}).items():
        if value not in (None, "", [], {}) and key in cfg:
            cfg[key] = value
    cfg = apply_changes(cfg, changes)
    created = rfc3339_nano(created_ns)
    history = list(image.get("history") or [])
    entry: dict[str, Any] = {"created": created}
    if author:
        entry["author"] = author
    cmd = container_config.get("Cmd") or []
    entry["created_by"] = " ".join([*(container_config.get("Entrypoint") or []), *cmd])
    if comment:
        entry["comment"] = comment
    if empty_layer:
        entry["empty_layer"] = True
    history.append(entry)
    rootfs = image.get("rootfs") or {}
    diff_ids = list(rootfs.get("diff_ids") or [])
    if not empty_layer:
        diff_ids.append(diff_id)
    doc = {"architecture": image.get("architecture") or "amd64", "author": author,
           "comment": comment, "config": cfg, "container": container_id,
           "container_config": normalize_container_config(container_config),
           "created": created, "docker_version": f"svc-{SVC_VERSION}", "history": history,
           "os": image.get("os") or "linux",
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    return encode_config(doc)
