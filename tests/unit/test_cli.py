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
