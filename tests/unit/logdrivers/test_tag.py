"""The tag template and the extra attributes every driver shares (svc.logdrivers)."""

from __future__ import annotations

import pytest

from svc.logdrivers.base import Info, OptionError
from svc.logdrivers.tag import check_tag, render_tag

CID = "0123456789ab" + "c" * 52
IID = "sha256:" + "fedcba987654" + "0" * 52


def info(**config: str) -> Info:
    return Info(config=config, container_id=CID, container_name="/web", image_id=IID,
                image_name="busybox:latest", created_ns=0, entrypoint="sh",
                args=["-c", "echo hi"], env=["A=1", "B=two", "NOVALUE", "LANG=C"],
                labels={"team": "core", "tier": "front", "other": "x"}, daemon_name="svc")


def test_default_tag_is_the_short_id() -> None:
    assert render_tag(info()) == CID[:12]


def test_every_field() -> None:
    tpl = ("{{.ID}} {{.FullID}} {{.Name}} {{.ImageID}} {{.ImageFullID}} {{.ImageName}} "
           "{{.DaemonName}} {{ .Command }}")
    assert render_tag(info(tag=tpl)) == (f"{CID[:12]} {CID} web fedcba987654 {IID} "
                                         "busybox:latest svc sh -c echo hi")


def test_older_option_names_are_read() -> None:
    assert render_tag(info(**{"syslog-tag": "app/{{.Name}}"})) == "app/web"


@pytest.mark.parametrize("tpl", ["{{.Nope}}", "{{.ID", "{{printf \"%s\" .ID}}", "x}}"])
def test_bad_templates_are_refused_naming_the_tag(tpl: str) -> None:
    with pytest.raises(OptionError, match="log tag template"):
        check_tag(tpl)


def test_extra_attributes_from_labels_and_env() -> None:
    got = info(labels="team,missing", env="B,LANG,NOVALUE").extra_attributes()
    assert got == {"team": "core", "B": "two", "LANG": "C"}
    got = info(**{"labels-regex": "^t", "env-regex": "^A$"}).extra_attributes()
    assert got == {"team": "core", "tier": "front", "A": "1"}
