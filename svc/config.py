"""Daemon configuration: one pydantic model fed by flags and by the JSON config file.

The config file uses the same keys as the long flags (``"exec-root"``, ``"tlsverify"``), plus the
spellings users bring from dockerd's daemon.json (``"hosts"``, ``"data-root"``, ``"debug"``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

LogLevel = Literal["debug", "info", "warn", "error", "fatal"]

DEFAULT_SOCKET = "unix:///var/run/svc.sock"


def default_cert_dir() -> Path:
    """Where TLS material is looked for when no path is given: $SVC_CERT_PATH,
    $DOCKER_CERT_PATH, then ~/.docker (as dockerd does)."""
    env = os.environ.get("SVC_CERT_PATH") or os.environ.get("DOCKER_CERT_PATH")
    return Path(env) if env else Path.home() / ".docker"


class DaemonConfig(BaseModel):
    """Everything the daemon needs to start. Field aliases are the config file's keys."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True)

    hosts: list[str] = Field(default_factory=lambda: [DEFAULT_SOCKET], alias="hosts")
    tls: bool | None = Field(None, alias="tls")
    tlsverify: bool = Field(False, alias="tlsverify")
    tlscacert: Path = Field(default_factory=lambda: default_cert_dir() / "ca.pem",
                            alias="tlscacert")
    tlscert: Path = Field(default_factory=lambda: default_cert_dir() / "cert.pem", alias="tlscert")
    tlskey: Path = Field(default_factory=lambda: default_cert_dir() / "key.pem", alias="tlskey")
    root: Path = Field(Path("/var/lib/svc"), alias="root")
    exec_root: Path = Field(Path("/var/run/svc"), alias="exec-root")
    runtime: str = Field("runc", alias="runtime")
    api_cors_header: str = Field("", alias="api-cors-header")
    log_level: LogLevel = Field("info", alias="log-level")
    debug: bool = Field(False, alias="debug")
    pidfile: Path = Field(Path("/var/run/svc.pid"), alias="pidfile")
    group: str = Field("svc", alias="group")
    cgroup_parent: str = Field("/svc", alias="cgroup-parent")
    shutdown_timeout: int = Field(10, alias="shutdown-timeout", ge=0)
    bridge: str = Field("svc0", alias="bridge")
    bip: str = Field("172.17.0.1/16", alias="bip")
    dns: list[str] = Field(default_factory=list, alias="dns")
    insecure_registries: list[str] = Field(default_factory=list, alias="insecure-registries")
    registry_mirrors: list[str] = Field(default_factory=list, alias="registry-mirrors")
    # the directory holding certs.d/<host:port>/{ca.crt,client.cert,client.key}
    registry_config_dir: Path = Field(Path("/etc/svc"), alias="registry-config-dir")
    # what a container that names no log driver gets, and that driver's default options
    log_driver: str = Field("json-file", alias="log-driver")
    log_opts: dict[str, str] = Field(default_factory=dict, alias="log-opts")
    # several hosts: the etcd cluster the daemons share, this daemon's address in it, options
    cluster_store: str = Field("", alias="cluster-store")
    cluster_advertise: str = Field("", alias="cluster-advertise")
    cluster_store_opts: dict[str, str] = Field(default_factory=dict, alias="cluster-store-opts")
    # plugins: where they are looked for (empty: the engines' directories and svc's own),
    # how long one call may take, and the authorization plugins every request goes through
    plugin_dirs: list[Path] = Field(default_factory=list, alias="plugin-dirs")
    plugin_timeout: float = Field(30.0, alias="plugin-timeout", gt=0)
    authorization_plugins: list[str] = Field(default_factory=list,
                                             alias="authorization-plugins")
    # containers outlive the daemon (under conmon) and are taken back at its start
    live_restore: bool = Field(False, alias="live-restore")

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    @property
    def tls_enabled(self) -> bool:
        """--tlsverify implies --tls, as with dockerd."""
        return bool(self.tls) or self.tlsverify

    @property
    def effective_log_level(self) -> LogLevel:
        return "debug" if self.debug else self.log_level


# Config-file keys accepted as synonyms, mapped to the canonical alias above.
FILE_KEY_SYNONYMS = {"host": "hosts", "data-root": "root", "graph": "root",
                     "exec_root": "exec-root"}
