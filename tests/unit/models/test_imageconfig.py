"""The typed image config: parsing what registries and archives carry, writing what dockerd
writes, and keeping what later engines added."""

from __future__ import annotations

import json

import pytest

from svc.engine.images import config as imageconfig
from svc.errors import InvalidParameter
from svc.models.containers import ContainerConfig
from svc.models.imageconfig import HistoryItem, ImageConfig, RootFSConfig, RunConfig, parse_lenient

# a config as dockerd 1.10 wrote it for `FROM busybox` + `EXPOSE 80` (abridged history)
DOCKERD = {
    "architecture": "amd64",
    "config": {"Hostname": "", "Domainname": "", "User": "", "AttachStdin": False,
               "AttachStdout": False, "AttachStderr": False, "ExposedPorts": {"80/tcp": {}},
               "Tty": False, "OpenStdin": False, "StdinOnce": False,
               "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
               "Cmd": ["sh"], "Image": "sha256:47bcc53f74dc", "Volumes": None,
               "WorkingDir": "", "Entrypoint": None, "OnBuild": [], "Labels": {}},
    "container": "3c3f2b1b3c5e",
    "container_config": {"Hostname": "", "Domainname": "", "User": "", "AttachStdin": False,
                         "AttachStdout": False, "AttachStderr": False,
                         "ExposedPorts": {"80/tcp": {}}, "Tty": False, "OpenStdin": False,
                         "StdinOnce": False, "Env": None,
                         "Cmd": ["/bin/sh", "-c", "#(nop) EXPOSE 80/tcp"],
                         "Image": "sha256:47bcc53f74dc", "Volumes": None, "WorkingDir": "",
                         "Entrypoint": None, "OnBuild": [], "Labels": {}},
    "created": "2016-03-01T10:00:00.123456789Z",
    "docker_version": "1.10.3",
    "history": [{"created": "2016-02-01T00:00:00Z",
                 "created_by": "/bin/sh -c #(nop) ADD file:abc in /"},
                {"created": "2016-03-01T10:00:00.123456789Z",
                 "created_by": "/bin/sh -c #(nop) EXPOSE 80/tcp", "empty_layer": True}],
    "os": "linux",
    "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "a" * 64]},
}


def test_a_dockerd_config_reads_into_fields_and_writes_back_byte_for_byte() -> None:
    raw = json.dumps(DOCKERD, separators=(",", ":")).encode()
    doc = ImageConfig.parse(raw)
    assert doc.run.Cmd == ["sh"]
    assert doc.run.ExposedPorts == {"80/tcp": {}}
    assert doc.container_config is not None
    assert doc.container_config.Cmd == ["/bin/sh", "-c", "#(nop) EXPOSE 80/tcp"]
    assert [h.empty_layer for h in doc.entries] == [False, True]
    assert doc.diff_ids == ["sha256:" + "a" * 64]
    assert doc.encode() == raw


def test_fields_of_later_engines_are_kept_in_place() -> None:
    raw = dict(DOCKERD, config={**DOCKERD["config"],  # type: ignore[dict-item]
                                "Healthcheck": {"Test": ["CMD", "true"]}, "ArgsEscaped": True},
               **{"os.version": "10.0"})
    doc = ImageConfig.parse(json.dumps(raw))
    assert doc.run.model_extra == {"Healthcheck": {"Test": ["CMD", "true"]},
                                   "ArgsEscaped": True}
    out = json.loads(doc.encode())
    assert out["config"]["Healthcheck"] == {"Test": ["CMD", "true"]}
    assert out["os.version"] == "10.0"
    assert list(out) == sorted(out)


def test_omitempty_fields_are_written_only_when_set() -> None:
    shown = RunConfig().doc()
    for name in ("ExposedPorts", "NetworkDisabled", "MacAddress", "StopSignal"):
        assert name not in shown
    assert list(shown)[:3] == ["Hostname", "Domainname", "User"]
    assert shown["Env"] is None and shown["OnBuild"] is None
    assert RunConfig(StopSignal="SIGINT").doc()["StopSignal"] == "SIGINT"
    # the history: created always, the rest when set
    assert HistoryItem(created="x").doc() == {"created": "x"}
    doc = ImageConfig(created="c", rootfs=RootFSConfig(type="layers", diff_ids=[])).doc()
    assert doc == {"created": "c", "rootfs": {"type": "layers", "diff_ids": []}}


@pytest.mark.parametrize("raw, says", [
    (b"{", "not JSON"),
    (b"[]", "not a JSON object"),
    (json.dumps({"config": {"Env": "A=1"}}).encode(), "config.Env"),
    (json.dumps({"history": [{"empty_layer": "maybe"}]}).encode(), "history.0.empty_layer"),
])
def test_a_malformed_config_is_a_400_naming_the_field(raw: bytes, says: str) -> None:
    with pytest.raises(InvalidParameter, match="invalid image config") as err:
        ImageConfig.parse(raw)
    assert says in str(err.value)


def test_a_stored_config_with_a_field_of_an_unknown_type_still_loads() -> None:
    raw = json.dumps({**DOCKERD, "config": {**DOCKERD["config"],  # type: ignore[dict-item]
                                            "Labels": {"ok": "1", "odd": 2}}})
    doc, dropped = parse_lenient(raw)
    assert dropped == ["config.Labels.odd"]
    assert doc.run.Labels == {"ok": "1"}
    assert doc.run.Cmd == ["sh"]


def test_go_field_names_match_case_insensitively_as_dockerd_decodes_them() -> None:
    doc = ImageConfig.parse(json.dumps({"Config": {"cmd": ["x"]}, "RootFS": {
        "Type": "layers", "Diff_IDs": ["sha256:" + "b" * 64]}}))
    assert doc.run.Cmd == ["x"]
    assert doc.check_rootfs() == ["sha256:" + "b" * 64]


def test_rootfs_must_be_layers_of_digests() -> None:
    with pytest.raises(InvalidParameter, match="type layers"):
        ImageConfig.parse(b"{}").check_rootfs()
    with pytest.raises(InvalidParameter, match="sha256 digests"):
        ImageConfig.parse(json.dumps({"rootfs": {"type": "layers",
                                                 "diff_ids": ["md5:x"]}})).check_rootfs()


def test_changes_apply_to_the_typed_config() -> None:
    cfg = imageconfig.apply_changes(RunConfig(), [
        'CMD ["/bin/app", "-v"]', "ENV A=1 B=2", "ENV A=3", "EXPOSE 80 53/udp",
        "LABEL k=v", "VOLUME /data", "USER nobody", "WORKDIR /srv", "STOPSIGNAL SIGINT",
        "ONBUILD RUN true", "ENTRYPOINT run me"])
    assert cfg.Cmd == ["/bin/app", "-v"]
    assert cfg.Env == ["B=2", "A=3"]
    assert cfg.ExposedPorts == {"80/tcp": {}, "53/udp": {}}
    assert cfg.Labels == {"k": "v"}
    assert cfg.Volumes == {"/data": {}}
    assert (cfg.User, cfg.WorkingDir, cfg.StopSignal) == ("nobody", "/srv", "SIGINT")
    assert cfg.OnBuild == ["RUN true"]
    assert cfg.Entrypoint == ["/bin/sh", "-c", "run me"]
    with pytest.raises(InvalidParameter, match="FROM is not a valid change command"):
        imageconfig.apply_changes(RunConfig(), ["FROM x"])
    with pytest.raises(InvalidParameter, match="USER requires an argument"):
        imageconfig.apply_changes(RunConfig(), ["USER  "])


def test_commit_records_the_container_over_the_image() -> None:
    image = ImageConfig.parse(json.dumps(DOCKERD))
    container = ContainerConfig(Cmd=["sleep", "1"], Env=["A=1"], Image="busybox")
    raw = imageconfig.commit_config(
        image, container, container_id="c" * 64, diff_id="sha256:" + "d" * 64, created_ns=0,
        comment="snap", author="me", changes=["EXPOSE 8080"], overrides={"User": "nobody"},
        empty_layer=False)
    doc = ImageConfig.parse(raw)
    assert doc.run.Cmd == ["sleep", "1"]
    assert doc.run.User == "nobody"
    assert doc.run.ExposedPorts == {"8080/tcp": {}}
    assert doc.container_config is not None and doc.container_config.User == ""
    assert doc.diff_ids == ["sha256:" + "a" * 64, "sha256:" + "d" * 64]
    assert doc.entries[-1].model_dump(exclude_defaults=True) == {
        "created": "1970-01-01T00:00:00.000000000Z", "author": "me", "created_by": "sleep 1",
        "comment": "snap"}
    assert (doc.author, doc.comment, doc.container) == ("me", "snap", "c" * 64)


def test_a_legacy_layer_json_becomes_a_config() -> None:
    layers = [{"id": "1", "created": "2015-01-01T00:00:00Z",
               "container_config": {"Cmd": ["/bin/sh", "-c", "#(nop) ADD file in /"]}},
              {"id": "2", "parent": "1", "created": "2015-01-02T00:00:00Z", "author": "a",
               "config": {"Cmd": ["sh"], "Memory": 0}, "docker_version": "1.6.2"}]
    doc = ImageConfig.parse(imageconfig.legacy_config(layers, ["sha256:" + "e" * 64] * 2))
    assert doc.run.Cmd == ["sh"]
    assert doc.run.model_extra == {"Memory": 0}  # a pre-1.18 field, passed on
    assert [h.created_by for h in doc.entries] == ["/bin/sh -c #(nop) ADD file in /", ""]
    assert (doc.architecture, doc.os, doc.author) == ("amd64", "linux", "a")
    with pytest.raises(InvalidParameter, match="a layer's json: config.Cmd"):
        imageconfig.legacy_config([{"config": {"Cmd": 5}}], ["sha256:" + "e" * 64])
