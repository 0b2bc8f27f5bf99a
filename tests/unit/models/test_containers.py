from __future__ import annotations

from svc.models.containers import CreateBody


def test_create_body_shapes() -> None:
    body = CreateBody.model_validate({
        "Image": "busybox", "Cmd": "echo hi", "Entrypoint": ["/bin/sh", "-c"],
        "StopSignal": 15, "Unknown": {"x": 1},
        "HostConfig": {"Binds": "/a:/b", "CapAdd": ["NET_ADMIN"], "Memory": 1 << 26,
                       "RestartPolicy": {"Name": "on-failure", "MaximumRetryCount": 3},
                       "LogConfig": {"Type": "json-file", "Config": {"max-size": "1m"}}}})
    assert body.Cmd == ["echo hi"] and body.Entrypoint == ["/bin/sh", "-c"]
    assert body.StopSignal == "15"
    hc = body.HostConfig
    assert hc is not None and hc.Binds == ["/a:/b"] and hc.Memory == 1 << 26
    assert hc.RestartPolicy.Name == "on-failure" and hc.RestartPolicy.MaximumRetryCount == 3
    assert hc.LogConfig.Config == {"max-size": "1m"}
    empty = CreateBody.model_validate({"Image": "x", "Cmd": None, "HostConfig": None})
    assert empty.Cmd is None and empty.HostConfig is None
