"""Request bodies decode field names as Go's encoding/json does: exact name first, else
case-insensitively, at every level; map keys are data; the last key for a field wins and
objects for a struct or a map merge."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from svc.api.params import parse_json_body
from svc.models.base import WireModel, fold
from svc.models.containers import CreateBody, UpdateBody
from svc.models.execs import ExecCreateBody
from svc.models.networks import ConnectBody, IPAMBody, NetworkCreateBody
from svc.models.volumes import VolumeCreateBody

JSON = "application/json"


def _create(doc: dict[str, Any] | bytes) -> CreateBody:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    body = parse_json_body(CreateBody, raw, JSON)
    assert body is not None
    return body


def test_nested_levels_fold() -> None:
    body = _create({
        "image": "busybox", "CMD": ["true"], "tty": True,
        "hostconfig": {
            "CpuSetCpus": "0", "memory": 8388608, "BINDS": ["/a:/b"],
            "restartpolicy": {"name": "on-failure", "maximumRetryCount": 2},
            "logConfig": {"type": "json-file", "config": {"Max-Size": "1m"}},
            "portbindings": {"80/tcp": [{"hostip": "127.0.0.1", "hostPort": "8080"}]},
            "mounts": [{"type": "tmpfs", "target": "/t", "tmpfsoptions": {"sizebytes": 1024}}],
        },
        "networkingconfig": {"endpointsconfig": {"MyNet": {
            "aliases": ["web"], "ipamconfig": {"ipv4address": "10.9.0.5"}}}},
    })
    assert body.Image == "busybox" and body.Cmd == ["true"] and body.Tty
    hc = body.HostConfig
    assert hc is not None
    assert hc.CpusetCpus == "0" and hc.Memory == 8388608 and hc.Binds == ["/a:/b"]
    assert hc.RestartPolicy.Name == "on-failure" and hc.RestartPolicy.MaximumRetryCount == 2
    assert hc.LogConfig.Type == "json-file"
    assert hc.LogConfig.Config == {"Max-Size": "1m"}  # a map: its keys are data
    assert hc.PortBindings is not None
    binding = (hc.PortBindings["80/tcp"] or [])[0]
    assert (binding.HostIp, binding.HostPort) == ("127.0.0.1", "8080")
    assert hc.Mounts is not None and hc.Mounts[0].Target == "/t"
    assert hc.Mounts[0].TmpfsOptions is not None and hc.Mounts[0].TmpfsOptions.SizeBytes == 1024
    assert body.NetworkingConfig is not None and body.NetworkingConfig.EndpointsConfig
    ep = body.NetworkingConfig.EndpointsConfig["MyNet"]  # the network's name kept as sent
    assert ep.Aliases == ["web"] and ep.IPAMConfig is not None
    assert ep.IPAMConfig.IPv4Address == "10.9.0.5"


def test_map_keys_are_not_folded() -> None:
    body = _create({"Image": "x", "labels": {"Foo": "1", "foo": "2", "IMAGE": "3"},
                    "exposedports": {"80/TCP": {}}, "volumes": {"/Data": {}}})
    assert body.Labels == {"Foo": "1", "foo": "2", "IMAGE": "3"}
    assert body.ExposedPorts == {"80/TCP": {}} and body.Volumes == {"/Data": {}}
    vol = parse_json_body(VolumeCreateBody, b'{"name": "v", "driveropts": {"Type": "tmpfs"},'
                                            b' "LABELS": {"A": "b"}}', JSON)
    assert vol is not None and vol.Name == "v"
    assert vol.DriverOpts == {"Type": "tmpfs"} and vol.Labels == {"A": "b"}


class _TwoFold(WireModel):
    """Two fields whose names fold alike: Go looks for the exact name first."""

    Ab: int = 0
    AB: int = 0


def test_exact_name_wins_else_first_field() -> None:
    assert _TwoFold.model_validate({"AB": 1}).model_dump() == {"Ab": 0, "AB": 1}
    assert _TwoFold.model_validate({"Ab": 1}).model_dump() == {"Ab": 1, "AB": 0}
    assert _TwoFold.model_validate({"ab": 1}).model_dump() == {"Ab": 1, "AB": 0}
    assert _TwoFold.model_validate({"aB": 2, "AB": 3}).model_dump() == {"Ab": 2, "AB": 3}


def test_last_key_for_a_field_wins() -> None:
    hc = _create({"Image": "x", "HostConfig": {"CpusetCpus": "0", "cpusetcpus": "1"}}).HostConfig
    assert hc is not None and hc.CpusetCpus == "1"
    hc = _create({"Image": "x", "HostConfig": {"cpusetcpus": "1", "CpusetCpus": "0"}}).HostConfig
    assert hc is not None and hc.CpusetCpus == "0"
    # an exact key repeated around a folded one: the document's order counts, not the dict's
    hc = _create(b'{"HostConfig": {"Memory": 1, "memory": 2, "Memory": 3}}').HostConfig
    assert hc is not None and hc.Memory == 3
    hc = _create(b'{"HostConfig": {"memory": 1, "Memory": 2, "MEMORY": 3, "Memory": 4,'
                 b' "mEmory": 5}}').HostConfig
    assert hc is not None and hc.Memory == 5
    assert _create(b'{"Cmd": ["a"], "cmd": "b"}').Cmd == ["b"]


def test_objects_for_one_struct_or_map_merge() -> None:
    body = _create(b'{"HostConfig": {"Memory": 1, "CpuShares": 5}, '
                   b'"hostconfig": {"cpushares": 2, "RestartPolicy": {"Name": "always"}}, '
                   b'"HOSTCONFIG": {"restartpolicy": {"MaximumRetryCount": 0}}, '
                   b'"Labels": {"a": "1", "b": "1"}, "labels": {"b": "2"}}')
    hc = body.HostConfig
    assert hc is not None and hc.Memory == 1 and hc.CpuShares == 2
    assert hc.RestartPolicy.Name == "always"  # a struct within: merged too
    assert body.Labels == {"a": "1", "b": "2"}
    # values of a map are fresh each time (Go zeroes the element): the later one replaces
    body = _create(b'{"NetworkingConfig": {"EndpointsConfig": {"n": {"Aliases": ["a"]}, '
                   b'"n": {"Links": ["b:c"]}}}}')
    assert body.NetworkingConfig is not None and body.NetworkingConfig.EndpointsConfig
    ep = body.NetworkingConfig.EndpointsConfig["n"]
    assert ep.Aliases is None and ep.Links == ["b:c"]
    # a null resets a pointer, a later object starts afresh
    hc = _create(b'{"HostConfig": {"Memory": 1}, "hostConfig": null, '
                 b'"HostConfig": {"CpuShares": 3}}').HostConfig
    assert hc is not None and hc.Memory == 0 and hc.CpuShares == 3


def test_unicode_simple_folding() -> None:
    assert fold("CpuSetCpus") == fold("cpusetcpus") == "CPUSETCPUS"
    assert fold("\u212aernel") == "KERNEL"  # the Kelvin sign folds to K, as in Go
    assert fold("\u017fhm") == "SHM"  # the long s folds to S
    hc = _create({"Image": "x", "HostConfig": {"\u212aernelMemory": 5,
                                                "CpuShare\u017f": 7}}).HostConfig
    assert hc is not None and hc.KernelMemory == 5 and hc.CpuShares == 7


def test_every_body_folds() -> None:
    ex = ExecCreateBody.model_validate({"cmd": ["sh"], "detachKeys": "ctrl-x",
                                        "attachstdout": True, "TTY": True})
    assert ex.Cmd == ["sh"] and ex.DetachKeys == "ctrl-x" and ex.AttachStdout and ex.Tty
    up = UpdateBody.model_validate({"cpushares": 512, "restartPolicy": {"name": "always"}})
    assert up.CpuShares == 512 and up.RestartPolicy is not None
    assert up.RestartPolicy.Name == "always"
    net = NetworkCreateBody.model_validate({"name": "n1", "checkDuplicate": True, "ipam": {
        "driver": "default", "config": [{"subnet": "10.7.0.0/24", "gateway": "10.7.0.1"}]}})
    assert net.Name == "n1" and net.CheckDuplicate and net.IPAM is not None
    assert net.IPAM.Config is not None and net.IPAM.Config[0].Gateway == "10.7.0.1"
    conn = ConnectBody.model_validate({"container": "c1", "endpointconfig": {
        "ipamconfig": {"IPv4address": "10.7.0.9"}, "ALIASES": ["x"]}})
    assert conn.Container == "c1" and conn.EndpointConfig is not None
    assert conn.EndpointConfig.Aliases == ["x"] and conn.EndpointConfig.IPAMConfig is not None
    assert conn.EndpointConfig.IPAMConfig.IPv4Address == "10.7.0.9"


def test_responses_keep_docker_names() -> None:
    ipam = IPAMBody.model_validate({"config": [{"subnet": "10.1.0.0/16"}]})
    assert ipam.model_dump()["Config"][0]["Subnet"] == "10.1.0.0/16"
    assert json.loads(ipam.wire())["Config"][0]["Subnet"] == "10.1.0.0/16"
    # no model takes a field for pydantic's class-based configuration (a deprecation warning)
    subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c",
                    "import svc.models.networks, svc.models.containers"], check=True)


def test_null_leaves_a_plain_field_as_it_was() -> None:
    """Go ignores null for a non-pointer field; a field that can hold null takes it."""
    body = CreateBody.model_validate({"Image": "x", "Tty": None, "Cmd": None, "HostConfig": {
        "Memory": None, "memory": None, "CpuShares": 512, "cpushares": None, "Binds": None}})
    assert body.Tty is False and body.Cmd is None
    hc = body.HostConfig
    assert hc is not None and hc.Memory == 0 and hc.CpuShares == 512 and hc.Binds is None
