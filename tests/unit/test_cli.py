from __future__ import annotations

import json
from pathlib import Path

import pytest

from svc.cli import ConfigError, load_config


def test_defaults(tmp_path: Path) -> None:
    cfg = load_config(["--config-file", str(_empty(tmp_path))])
    assert cfg is not None
    assert cfg.hosts == ["unix:///var/run/svc.sock"]
    assert cfg.root == Path("/var/lib/svc") and cfg.exec_root == Path("/var/run/svc")
    assert cfg.runtime == "runc" and cfg.log_level == "info" and not cfg.tls_enabled


def _empty(tmp_path: Path) -> Path:
    p = tmp_path / "empty.json"
    p.write_text("{}")
    return p


def test_flags(tmp_path: Path) -> None:
    cfg = load_config(["-H", "unix:///a.sock", "-H", "tcp://127.0.0.1:2376", "--tlsverify",
                       "--root", "/r", "--exec-root", "/e", "--runtime", "/usr/bin/runc",
                       "--api-cors-header", "*", "-l", "debug", "--pidfile", "/p",
                       "--config-file", str(_empty(tmp_path))])
    assert cfg is not None
    assert cfg.hosts == ["unix:///a.sock", "tcp://127.0.0.1:2376"]
    assert cfg.tlsverify and cfg.tls_enabled and cfg.tls is None
    assert (cfg.root, cfg.exec_root, cfg.pidfile) == (Path("/r"), Path("/e"), Path("/p"))
    assert cfg.api_cors_header == "*" and cfg.effective_log_level == "debug"


def test_tls_false_is_explicit(tmp_path: Path) -> None:
    cfg = load_config(["--tls=false", "--config-file", str(_empty(tmp_path))])
    assert cfg is not None and cfg.tls is False and not cfg.tls_enabled


def test_config_file_synonyms_and_conflicts(tmp_path: Path) -> None:
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"hosts": "unix:///x.sock", "data-root": "/data", "debug": True}))
    cfg = load_config(["--config-file", str(f)])
    assert cfg is not None
    assert cfg.hosts == ["unix:///x.sock"] and cfg.root == Path("/data")
    assert cfg.effective_log_level == "debug"
    with pytest.raises(ConfigError, match="root"):
        load_config(["--config-file", str(f), "--root", "/other"])
    f.write_text(json.dumps({"nonsense": 1}))
    with pytest.raises(ConfigError, match="unknown directive 'nonsense'"):
        load_config(["--config-file", str(f)])
    f.write_text(json.dumps({"log-level": "shout"}))
    with pytest.raises(ConfigError, match="log-level"):
        load_config(["--config-file", str(f)])


def test_missing_default_config_file_is_fine(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(["--config-file", str(tmp_path / "nope.json")])


def test_config_file_synonym_clash(tmp_path: Path) -> None:
    f = tmp_path / "d.json"
    f.write_text(json.dumps({"graph": "/a", "data-root": "/b"}))
    with pytest.raises(ConfigError, match="'graph' and 'data-root' set the same directive"):
        load_config(["--config-file", str(f)])


def test_registry_flags_and_their_info(tmp_path: Path) -> None:
    from svc.daemon import registry_config
    from svc.engine.system import registry_info

    config = load_config(["--config-file", str(_empty_file(tmp_path)),
                          "--insecure-registry", "10.0.0.0/8",
                          "--insecure-registry", "reg.local:5000",
                          "--registry-mirror", "https://mirror.local/"])
    assert config is not None
    registries = registry_config(config)
    assert registries.insecure_registries == ("10.0.0.0/8", "reg.local:5000")
    assert registries.registry_mirrors == ("https://mirror.local",)
    info = registry_info(registries)
    assert info.InsecureRegistryCIDRs == ["127.0.0.0/8", "10.0.0.0/8"]
    assert info.IndexConfigs["reg.local:5000"].Secure is False
    assert info.IndexConfigs["docker.io"].Mirrors == ["https://mirror.local"]
    assert info.Mirrors == ["https://mirror.local"]


def test_registry_settings_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"insecure-registries": ["r:1"], "registry-mirrors": ["https://m"]}')
    config = load_config(["--config-file", str(path)])
    assert config is not None
    assert config.insecure_registries == ["r:1"] and config.registry_mirrors == ["https://m"]


def _empty_file(tmp_path: Path) -> Path:
    path = tmp_path / "empty.json"
    path.write_text("{}")
    return path


def test_log_defaults_from_flags_and_the_config_file(tmp_path: Path) -> None:
    none = tmp_path / "none.json"
    none.write_text("{}")
    cfg = load_config(["--config-file", str(none), "--log-opt", "max-size=10m",
                       "--log-opt", "max-file=3", "--log-driver", "json-file"])
    assert cfg is not None
    assert cfg.log_driver == "json-file" and cfg.log_opts == {"max-size": "10m", "max-file": "3"}
    daemon_json = tmp_path / "daemon.json"
    daemon_json.write_text(json.dumps({"log-driver": "none", "log-opts": {}}))
    cfg = load_config(["--config-file", str(daemon_json)])
    assert cfg is not None and cfg.log_driver == "none"


def test_log_defaults_merge_as_dockerd_merges_them() -> None:
    from svc.engine.containers.config import LogDefaults, with_log_defaults
    from svc.models.containers import HostConfigBody

    defaults = LogDefaults("json-file", (("max-file", "3"), ("max-size", "10m")))
    merged = with_log_defaults(HostConfigBody(), defaults)
    assert merged.LogConfig.Type == "json-file"
    assert merged.LogConfig.Config == {"max-file": "3", "max-size": "10m"}
    own = HostConfigBody.model_validate({"LogConfig": {"Type": "json-file",
                                                       "Config": {"max-size": "1k"}}})
    assert with_log_defaults(own, defaults).LogConfig.Config == {"max-size": "1k",
                                                                 "max-file": "3"}
    other = HostConfigBody.model_validate({"LogConfig": {"Type": "none"}})
    assert with_log_defaults(other, defaults).LogConfig.Config in (None, {})


def test_plugin_settings_from_flags_and_the_config_file(tmp_path: Path) -> None:
    cfg = load_config(["--plugin-dir", "/a", "--plugin-dir", "/b", "--plugin-timeout", "2.5",
                       "--authorization-plugin", "first", "--authorization-plugin", "second",
                       "--config-file", str(_empty(tmp_path))])
    assert cfg is not None
    assert cfg.plugin_dirs == [Path("/a"), Path("/b")] and cfg.plugin_timeout == 2.5
    assert cfg.authorization_plugins == ["first", "second"]  # asked in this order
    f = tmp_path / "daemon.json"
    f.write_text(json.dumps({"authorization-plugins": ["authz"], "plugin-timeout": 5}))
    cfg = load_config(["--config-file", str(f)])
    assert cfg is not None and cfg.authorization_plugins == ["authz"]
    assert cfg.plugin_dirs == [] and cfg.plugin_timeout == 5  # the default directories
    with pytest.raises(ConfigError, match="plugin-timeout"):
        load_config(["--plugin-timeout", "0", "--config-file", str(_empty(tmp_path))])
