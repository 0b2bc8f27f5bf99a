"""Image config documents svc makes: import, legacy load, commit, and ``changes``.

An image config is the JSON whose sha256 is the image id; its typed record is
``svc.models.imageconfig.ImageConfig``, which writes it compactly as dockerd does, so that
configs svc makes look like the ones users know.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from svc.engine.networks.ports import parse_port
from svc.errors import InvalidParameter
from svc.models.containers import ContainerConfig
from svc.models.imageconfig import HistoryItem, ImageConfig, RootFSConfig, RunConfig
from svc.version import SVC_VERSION
from svc.wire.timefmt import rfc3339_nano

# What a legacy layer json passes on to the image config made from it.
LEGACY_KEYS = ("architecture", "author", "comment", "config", "container", "container_config",
               "created", "docker_version", "os")

# The instructions ``docker import --change`` accepts (dockerd 1.10).
CHANGE_COMMANDS = ("CMD", "ENTRYPOINT", "ENV", "EXPOSE", "LABEL", "ONBUILD", "USER", "VOLUME",
                   "WORKDIR", "STOPSIGNAL")


def import_config(diff_id: str, *, created_ns: int, changes: Iterable[str] = (),
                  comment: str = "Imported from -") -> bytes:
    """The config of an image imported from a rootfs tarball (one layer, no parent)."""
    created = rfc3339_nano(created_ns)
    doc = ImageConfig(
        architecture="amd64", comment=comment, config=apply_changes(RunConfig(), changes),
        container_config=RunConfig(), created=created, docker_version=f"svc-{SVC_VERSION}",
        history=[HistoryItem(created=created, comment=comment)], os="linux",
        rootfs=RootFSConfig(type="layers", diff_ids=[diff_id]))
    return doc.encode()


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


def apply_changes(config: RunConfig, changes: Iterable[str]) -> RunConfig:
    """Apply Dockerfile-style instructions (``docker import --change``) to ``config`` (in
    place; returned for convenience)."""
    for line in changes:
        line = line.strip()
        if not line:
            continue
        command, _, rest = line.partition(" ")
        command = command.upper()
        if command not in CHANGE_COMMANDS:
            raise InvalidParameter(f"{command} is not a valid change command")
        if command == "CMD":
            config.Cmd = _json_or_shell(rest, shell=True)
        elif command == "ENTRYPOINT":
            config.Entrypoint = _json_or_shell(rest, shell=True)
        elif command == "ENV":
            env = list(config.Env or [])
            for k, v in _pairs(rest, command).items():
                env = [e for e in env if e.split("=", 1)[0] != k] + [f"{k}={v}"]
            config.Env = env
        elif command == "LABEL":
            config.Labels = {**(config.Labels or {}), **_pairs(rest, command)}
        elif command == "EXPOSE":
            ports = dict(config.ExposedPorts or {})
            for p in rest.split():
                try:
                    port, proto = parse_port(p)
                except InvalidParameter:
                    raise InvalidParameter(f"EXPOSE: invalid port {p!r}") from None
                ports[f"{port}/{proto}"] = {}
            config.ExposedPorts = ports
        elif command == "VOLUME":
            vols = dict(config.Volumes or {})
            for v in _json_or_shell(rest, shell=False):
                vols[v] = {}
            config.Volumes = vols
        elif command == "ONBUILD":
            config.OnBuild = [*(config.OnBuild or []), rest.strip()]
        elif command == "STOPSIGNAL":
            config.StopSignal = rest.strip()
        elif not rest.strip():  # USER, WORKDIR
            raise InvalidParameter(f"{command} requires an argument")
        elif command == "USER":
            config.User = rest.strip()
        else:
            config.WorkingDir = rest.strip()
    return config


def legacy_config(layers: list[Mapping[str, Any]], diff_ids: list[str]) -> bytes:
    """An image config made from a legacy save's per-layer json files (bottom first).

    As dockerd does for v1 images: the top layer's json supplies the config, each layer
    becomes one history entry, and the rootfs lists the layers' diff ids.
    """
    history = []
    for layer in layers:
        cc = layer.get("container_config") or {}
        cmd = cc.get("Cmd") if isinstance(cc, dict) else None
        history.append(HistoryItem(
            created=str(layer.get("created") or "1970-01-01T00:00:00Z"),
            author=str(layer.get("author") or ""), comment=str(layer.get("comment") or ""),
            created_by=" ".join(str(c) for c in cmd) if isinstance(cmd, list) else ""))
    top = {k: v for k, v in layers[-1].items()
           if k in LEGACY_KEYS and v not in (None, "")}
    try:
        doc = ImageConfig.model_validate(top)
    except ValidationError as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise InvalidParameter(f"invalid image archive: a layer's json: {where}: "
                               f"{exc.errors()[0]['msg']}") from None
    doc.architecture = doc.architecture or "amd64"
    doc.os = doc.os or "linux"
    doc.config = doc.run
    doc.history = history
    doc.rootfs = RootFSConfig(type="layers", diff_ids=diff_ids)
    return doc.encode()


def commit_config(image: ImageConfig, container: ContainerConfig, *,
                  container_id: str, diff_id: str, created_ns: int, comment: str, author: str,
                  changes: Iterable[str], overrides: Mapping[str, Any] | None,
                  empty_layer: bool) -> bytes:
    """The config of ``docker commit``: the container's configuration (with ``overrides``
    from the request body, then the ``changes`` instructions) over the image's history and
    layers plus the new one (moby ``daemon.Commit``)."""
    made = RunConfig.model_validate(container.model_dump())
    cfg = made.model_copy(deep=True)
    for key, value in (overrides or {}).items():
        if value not in (None, "", [], {}) and key in RunConfig.model_fields:
            setattr(cfg, key, value)
    cfg = RunConfig.model_validate(cfg.model_dump())  # the overrides, checked
    apply_changes(cfg, changes)
    created = rfc3339_nano(created_ns)
    entry = HistoryItem(created=created, author=author, comment=comment,
                        created_by=" ".join([*(made.Entrypoint or []), *(made.Cmd or [])]),
                        empty_layer=empty_layer)
    diff_ids = image.diff_ids if empty_layer else [*image.diff_ids, diff_id]
    doc = ImageConfig(
        architecture=image.architecture or "amd64", author=author, comment=comment, config=cfg,
        container=container_id, container_config=made, created=created,
        docker_version=f"svc-{SVC_VERSION}", history=[*image.entries, entry],
        os=image.os or "linux", rootfs=RootFSConfig(type="layers", diff_ids=diff_ids))
    return doc.encode()
