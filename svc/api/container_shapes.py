"""Containers as the API shows them: inspect and list entries, shaped per API version."""

from __future__ import annotations

import time
from typing import Any

import pydantic_core

from svc.api.versioning import Version
from svc.engine.containers.container import Container
from svc.engine.containers.links import parse_link
from svc.engine.containers.state import State, human_duration, status_text
from svc.engine.images.service import ImageService
from svc.engine.networks import ports
from svc.engine.networks.endpoints import EndpointPlan
from svc.engine.networks.service import NetworkService
from svc.errors import InvalidParameter, SvcError
from svc.models.containers import (
    ContainerInspect,
    ContainerStateBody,
    ContainerSummary,
    EndpointSettings,
    MountPoint,
    NetworkSettingsBody,
    PortBody,
)
from svc.wire.timefmt import rfc3339_nano

ZERO_TIME = "0001-01-01T00:00:00Z"


def timestamp(ns: int) -> str:
    return rfc3339_nano(ns) if ns else ZERO_TIME


def state_body(c: Container) -> ContainerStateBody:
    st = c.state
    s = st.status
    running = s in (State.RUNNING, State.PAUSED, State.RESTARTING)
    return ContainerStateBody(
        Status=s.value, Running=running, Paused=s is State.PAUSED,
        Restarting=s is State.RESTARTING, OOMKilled=st.oom_killed, Dead=s is State.DEAD,
        Pid=st.pid if running else 0, ExitCode=st.exit_code, Error=st.error,
        StartedAt=timestamp(st.started_ns), FinishedAt=timestamp(st.finished_ns))


def _network_name(c: Container) -> str:
    mode = c.host_config.NetworkMode or "default"
    return "bridge" if mode == "default" else mode


def network_settings(c: Container, nets: NetworkService) -> NetworkSettingsBody:
    """The container's networks (addresses on those it is attached to now); the top-level
    address fields are the default bridge's, as dockerd fills them."""
    mode = _network_name(c)
    if mode.startswith("container:"):
        return NetworkSettingsBody(Networks={}, Ports=None, SandboxKey="")
    live = c.live
    key = f"/proc/{live.pid}/ns/net" if live is not None and mode != "host" else ""
    port_map = ports.port_map(c.host_config, c.config, nets.published(c.id))
    attached = {net.id: (net, info) for net, info in nets.of_container(c.id)}
    try:
        planned = nets.plan(c.host_config.NetworkMode or "default", c.net_config)
    except SvcError:
        planned = []
    if mode in ("host", "none"):
        try:
            planned = [(nets.resolve(mode), EndpointPlan())]
        except SvcError:
            planned = []
    body = NetworkSettingsBody(Networks={}, SandboxKey=key,
                               Ports=port_map if mode not in ("host", "none") else None)
    for net, cfg in planned:
        es = EndpointSettings(NetworkID=net.id, Aliases=list(cfg.aliases) or None,
                              IPAMConfig=cfg.ipam_body(), Links=list(cfg.links) or None)
        if net.id in attached and not net.builtin and c.short_id not in (es.Aliases or []):
            # dockerd adds the short id to a user network's aliases when it connects
            es = es.model_copy(update={"Aliases": [*(es.Aliases or []), c.short_id]})
        if net.id in attached:
            info = attached[net.id][1]
            ep = info.endpoint
            es = es.model_copy(update={
                "Gateway": ep.gateway, "IPAddress": ep.address, "IPPrefixLen": ep.prefixlen,
                "MacAddress": ep.mac, "EndpointID": info.endpoint_id,
                "GlobalIPv6Address": ep.address6, "GlobalIPv6PrefixLen": ep.prefixlen6,
                "IPv6Gateway": ep.gateway6})
            if net.name == "bridge" and net.builtin:
                body = body.model_copy(update={
                    "Bridge": net.bridge, "SandboxID": c.id, "Gateway": ep.gateway,
                    "IPAddress": ep.address, "IPPrefixLen": ep.prefixlen,
                    "MacAddress": ep.mac, "EndpointID": info.endpoint_id})
        body.Networks[net.name] = es
    return body


def mounts(c: Container) -> list[MountPoint]:
    return [MountPoint(Name=m.Name, Source=m.Source, Destination=m.Destination,
                       Driver=m.Driver, Mode=m.Mode, RW=m.RW,
                       Propagation=m.Propagation) for m in c.mounts]


def _host_config(c: Container) -> dict[str, Any]:
    """The HostConfig object of inspect: ``Mounts`` (v1.25's) only when a client sent it,
    ``Tmpfs`` only when set, as dockerd omits them; links shown as dockerd shows them:
    ``/target:/linker/alias`` (the form docker-py's and the CLI's code parse)."""
    out = c.host_config.model_dump()
    if out.get("Mounts") is None:
        out.pop("Mounts", None)
    if not out.get("Tmpfs"):
        out.pop("Tmpfs", None)
    links = c.host_config.Links
    if not links:
        return out
    shown = []
    for entry in links:
        try:
            target, alias = parse_link(entry)
        except InvalidParameter:
            continue
        shown.append(f"/{target}:{c.name}/{alias}")
    out["Links"] = shown or None
    return out


def inspect(c: Container, images: ImageService, nets: NetworkService, version: Version,
            sizes: tuple[int, int] | None = None) -> dict[str, Any]:
    # (constructed, not validated: every field is svc's own, already of its type)
    body = ContainerInspect.model_construct(
        Id=c.id, Created=timestamp(c.created_ns), Path=c.path, Args=c.args,
        State=state_body(c), Image=c.image_id, Name=c.name,
        RestartCount=c.restart_count, ExecIDs=list(c.exec_ids) or None,
        HostConfig=_host_config(c), Mounts=mounts(c), Config=_config(c, version),
        NetworkSettings=network_settings(c, nets),
        SizeRw=sizes[0] if sizes else None, SizeRootFs=sizes[1] if sizes else None,
        **_paths(c, images),
    ).model_dump(exclude_none=False)
    if sizes is None:
        body.pop("SizeRw")
        body.pop("SizeRootFs")
    state = body["State"]
    if version < (1, 21):  # the engines' inspect before 1.21 was another struct
        state.pop("Status")
        state.pop("Dead")
        for m in body["Mounts"]:
            for key in ("Name", "Driver", "Propagation"):
                m.pop(key)
    if version < (1, 20):
        body["Volumes"] = {m["Destination"]: m["Source"] for m in body["Mounts"]}
        body["VolumesRW"] = {m["Destination"]: m["RW"] for m in body["Mounts"]}
        if version < (1, 17):
            body.pop("Mounts")
    if version < (1, 21):
        body["NetworkSettings"].pop("Networks")
    return body


def _paths(c: Container, images: ImageService) -> dict[str, Any]:
    """The files and layer directories inspect shows: ``Container``'s paths, joined as text
    (seven ``Path`` joins cost 60 us, a third of a fresh inspect; strings 0.5 us, so nothing
    is kept per container); the image's layer directories are kept per image."""
    image = images.images.get(c.image_id)
    graph = images.graph_data(image) if image is not None else {}
    d = str(c.dir)
    fs = d + "/fs"
    graph["UpperDir"], graph["WorkDir"], graph["MergedDir"] = fs + "/diff", fs + "/work", \
        fs + "/merged"
    return {"ResolvConfPath": d + "/resolv.conf", "HostnamePath": d + "/hostname",
            "HostsPath": d + "/hosts",
            "LogPath": f"{d}/{c.id}-json.log" if c.log_driver() == "json-file" else "",
            "GraphDriver": {"Name": "overlay2", "Data": graph}}


def _config(c: Container, version: Version) -> dict[str, Any]:
    cfg = c.config.model_dump()
    if version < (1, 21):
        cfg.pop("StopSignal", None)
    if version < (1, 17):
        cfg.pop("Labels", None)
    return cfg


def command_text(c: Container) -> str:
    return " ".join([c.path, *c.args])


def _status(c: Container) -> str:
    st = c.state
    now = time.time_ns()
    if st.status in (State.RUNNING, State.PAUSED):
        since = human_duration((now - st.started_ns) / 1e9)
    else:
        since = human_duration((now - st.finished_ns) / 1e9) if st.finished_ns else ""
    return status_text(st.status, exit_code=st.exit_code, since=since)


def summary(c: Container, nets: NetworkService, names: list[str], version: Version,
            sizes: tuple[int, int] | None = None) -> dict[str, Any]:
    """The list entry (built afresh: ``encoded_summary`` is the list's way without sizes)."""
    out = _summary(c, nets, names, version, sizes)
    out["Status"] = _status(c)
    return out


def encoded_summary(c: Container, nets: NetworkService, names: list[str],
                    version: Version) -> bytes:
    """The list entry without sizes, as JSON. Everything but Status (which ages) is kept
    encoded until the container's next saved change, in two pieces around Status's value
    (a third of the entry as dicts), so listing many containers costs little more than
    joining them."""
    key = (c.revision, tuple(names))
    slot = ("summary", version)
    entry = c.view_cache.get(slot)
    if entry is None or entry[0] != key:
        entry = c.view_cache[slot] = (key, *_split_at_status(
            _summary(c, nets, names, version, None)))
    return entry[1] + pydantic_core.to_json(_status(c)) + entry[2]


def _split_at_status(body: dict[str, Any]) -> tuple[bytes, bytes]:
    """``body`` encoded up to Status's value, and after it."""
    keys = list(body)
    at = keys.index("Status")
    before = pydantic_core.to_json({k: body[k] for k in keys[:at]})
    after = pydantic_core.to_json({k: body[k] for k in keys[at + 1:]})
    head = before[:-1] + b',"Status":' if at else b'{"Status":'
    return head, b"," + after[1:] if after != b"{}" else b"}"


def _summary(c: Container, nets: NetworkService, names: list[str], version: Version,
             sizes: tuple[int, int] | None) -> dict[str, Any]:
    st = c.state
    status = ""
    net = network_settings(c, nets)
    port_list = []
    for key, entries in sorted((net.Ports or {}).items()):
        if not ports.valid_port(key):
            continue
        private, proto = ports.parse_port(key)
        for e in entries or [None]:
            port_list.append(PortBody(PrivatePort=private, Type=proto,
                                  IP=e["HostIp"] if e else None,
                                  PublicPort=int(e["HostPort"]) if e else None))
    body = ContainerSummary(
        Id=c.id, Names=names, Image=c.config.Image or c.image_id,
        ImageID=c.image_id, Command=command_text(c), Created=c.created_ns // 10**9,
        Ports=port_list, Labels=dict(c.config.Labels or {}), State=st.status.value,
        Status=status, HostConfig={"NetworkMode": c.host_config.NetworkMode or "default"},
        NetworkSettings={"Networks": {k: v.model_dump() for k, v in net.Networks.items()}},
        Mounts=mounts(c), SizeRw=sizes[0] if sizes else None,
        SizeRootFs=sizes[1] if sizes else None,
    ).model_dump()
    for p in body["Ports"]:
        for key in ("IP", "PublicPort"):
            if p[key] is None:
                p.pop(key)
    if sizes is None:
        body.pop("SizeRw")
        body.pop("SizeRootFs")
    if version < (1, 23):
        body.pop("State")
        body.pop("Mounts")
    if version < (1, 22):
        body.pop("NetworkSettings")
        body.pop("HostConfig")
    if version < (1, 21):
        body.pop("ImageID")
    if version < (1, 17):
        body.pop("Labels")
    return body


def fallback_summary(c: Container, names: list[str]) -> dict[str, Any]:
    """What the list shows of a container whose record cannot be shaped in full (reported
    in the log): the fields that need nothing but the record's identity."""
    return {"Id": c.id, "Names": names, "Image": c.config.Image or c.image_id,
            "ImageID": c.image_id, "Command": "", "Created": c.created_ns // 10**9,
            "Ports": [], "Labels": {}, "State": c.state.status.value, "Status": _status(c),
            "HostConfig": {"NetworkMode": "default"}, "NetworkSettings": {"Networks": {}},
            "Mounts": []}


_NET_ZERO = {k: 0 for k in ("rx_bytes", "rx_packets", "rx_errors", "rx_dropped", "tx_bytes",
                            "tx_packets", "tx_errors", "tx_dropped")}


def stats(doc: dict[str, Any], version: Version) -> dict[str, Any]:
    """A stats object for ``version``: one ``network`` object (the container's eth0) before
    v1.21, the ``networks`` map after; ``pids_stats`` from v1.23."""
    out = dict(doc)
    if version < (1, 21):
        nets = out.pop("networks")
        out["network"] = nets.get("eth0", dict(_NET_ZERO))
    if version < (1, 23):
        out.pop("pids_stats", None)
    return out
