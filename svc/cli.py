"""``svcd``: command line flags in the style of dockerd, turned into a DaemonConfig.

Flags and the config file are merged the way dockerd merges them: a key given in both places is
an error that names it, and an unknown key in the file is an error too (a typo must not be
silently ignored on a daemon that guards a root socket).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from svc.config import DEFAULT_SOCKET, FILE_KEY_SYNONYMS, DaemonConfig
from svc.version import API_VERSION_STR, SVC_VERSION

DEFAULT_CONFIG_FILE = Path("/etc/svc/daemon.json")

log = logging.getLogger("svc")


class ConfigError(Exception):
    """The flags or the config file cannot be turned into a configuration."""


def _bool_flag(value: str) -> bool:
    low = value.lower()
    if low in ("1", "true", "t", "yes"):
        return True
    if low in ("0", "false", "f", "no"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value {value!r}")


def _key_value(value: str) -> tuple[str, str]:
    key, eq, val = value.partition("=")
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"invalid log opt {value!r}: use KEY=VALUE")
    return key, val


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="svcd",
        description="svc container engine daemon (Engine API 1.14-1.23).",
        argument_default=argparse.SUPPRESS,
    )
    p.add_argument("-H", "--host", dest="hosts", action="append", metavar="HOST",
                   help=f"socket to listen on, repeatable (default {DEFAULT_SOCKET}); "
                        "unix:///path or tcp://HOST:PORT")
    p.add_argument("--tls", nargs="?", const=True, type=_bool_flag, metavar="BOOL",
                   help="serve TCP sockets over TLS (--tls=false allows plain TCP, insecurely)")
    p.add_argument("--tlsverify", nargs="?", const=True, type=_bool_flag, metavar="BOOL",
                   help="use TLS and require client certificates signed by --tlscacert")
    p.add_argument("--tlscacert", type=Path, help="CA that client certificates must chain to")
    p.add_argument("--tlscert", type=Path, help="server certificate")
    p.add_argument("--tlskey", type=Path, help="server key")
    p.add_argument("-g", "--root", "--data-root", dest="root", type=Path,
                   help="root of the daemon's persistent state (default /var/lib/svc)")
    p.add_argument("--exec-root", dest="exec_root", type=Path,
                   help="root of the daemon's runtime state (default /var/run/svc)")
    p.add_argument("--runtime", help="OCI runtime binary (default runc)")
    p.add_argument("--api-cors-header", dest="api_cors_header",
                   help="Access-Control-Allow-Origin value; empty disables CORS")
    p.add_argument("-l", "--log-level", dest="log_level",
                   choices=["debug", "info", "warn", "error", "fatal"], help="logging level")
    p.add_argument("-D", "--debug", nargs="?", const=True, type=_bool_flag, help="debug logging")
    p.add_argument("-p", "--pidfile", type=Path, help="pid file (default /var/run/svc.pid)")
    p.add_argument("-G", "--group", help="group owning the unix socket (default svc)")
    p.add_argument("--cgroup-parent", dest="cgroup_parent",
                   help="cgroup under which containers' cgroups are made (default /svc)")
    p.add_argument("-b", "--bridge", help="the default bridge network's Linux bridge "
                   "(default svc0; made if missing)")
    p.add_argument("--dns", action="append", help="DNS server for containers (repeatable): "
                   "their resolv.conf, and the embedded server's upstream on user networks")
    p.add_argument("--bip", help="the default bridge's gateway address and subnet "
                   "(default 172.17.0.1/16)")
    p.add_argument("--insecure-registry", dest="insecure_registries", action="append",
                   help="a registry (host[:port]) or CIDR reached over plain HTTP or "
                        "unverified TLS (repeatable; loopback always is)")
    p.add_argument("--registry-mirror", dest="registry_mirrors", action="append",
                   help="a mirror (https://host) tried before Docker Hub (repeatable)")
    p.add_argument("--registry-config-dir", dest="registry_config_dir", type=Path,
                   help="directory holding certs.d/<host:port>/ with a registry's ca.crt, "
                        "client.cert and client.key (default /etc/svc)")
    p.add_argument("--shutdown-timeout", dest="shutdown_timeout", type=int,
                   help="seconds a container gets to stop when the daemon shuts down "
                        "(default 10; then it is killed)")
    p.add_argument("--log-driver", dest="log_driver",
                   help="log driver of containers that name none (default json-file)")
    p.add_argument("--log-opt", dest="log_opts", action="append", type=_key_value,
                   metavar="KEY=VALUE", help="a default option of that log driver, "
                   "repeatable (e.g. max-size=10m, max-file=3); containers' own win")
    p.add_argument("--cluster-store", dest="cluster_store", metavar="URL",
                   help="the etcd cluster shared by several svc hosts: "
                        "etcd://host:port[,host:port...][/prefix]")
    p.add_argument("--cluster-advertise", dest="cluster_advertise", metavar="ADDR:PORT",
                   help="this host's address for the others: <ip|interface>:<port>")
    p.add_argument("--cluster-store-opt", dest="cluster_store_opts", action="append",
                   type=_key_value, metavar="KEY=VALUE",
                   help="kv.cacertfile, kv.certfile, kv.keyfile (TLS to etcd), "
                        "discovery.heartbeat, discovery.ttl (seconds); repeatable")
    p.add_argument("--plugin-dir", dest="plugin_dirs", action="append", type=Path,
                   metavar="DIR", help="where plugin sockets and spec files are looked for, "
                   "repeatable; replaces the defaults (/run/svc/plugins, /run/docker/plugins, "
                   "/etc/svc/plugins, /usr/lib/svc/plugins, /etc/docker/plugins, "
                   "/usr/lib/docker/plugins)")
    p.add_argument("--plugin-timeout", dest="plugin_timeout", type=float, metavar="SECONDS",
                   help="how long one call to a plugin may take, and how long a plugin that "
                        "is starting is waited for (default 30)")
    p.add_argument("--authorization-plugin", dest="authorization_plugins", action="append",
                   metavar="NAME", help="an authorization plugin every request must pass, "
                   "repeatable (asked in order)")
    p.add_argument("--live-restore", dest="live_restore", action="store_true",
                   help="keep containers running while the daemon is down (stopped, killed "
                        "or upgraded), and take them back when it starts")
    p.add_argument("--config-file", dest="config_file", type=Path,
                   help="JSON file with the same keys as the flags "
                        f"(default {DEFAULT_CONFIG_FILE})")
    p.add_argument("-v", "--version", action="store_true", help="print the version and exit")
    return p


# argparse dest -> the config-file key (DaemonConfig alias)
_DEST_TO_KEY = {"log_driver": "log-driver", "log_opts": "log-opts",
                "exec_root": "exec-root", "api_cors_header": "api-cors-header",
                "log_level": "log-level", "cgroup_parent": "cgroup-parent",
                "shutdown_timeout": "shutdown-timeout",
                "insecure_registries": "insecure-registries",
                "registry_mirrors": "registry-mirrors",
                "registry_config_dir": "registry-config-dir",
                "cluster_store": "cluster-store", "cluster_advertise": "cluster-advertise",
                "cluster_store_opts": "cluster-store-opts", "plugin_dirs": "plugin-dirs",
                "plugin_timeout": "plugin-timeout",
                "authorization_plugins": "authorization-plugins",
                "live_restore": "live-restore"}


def load_config(argv: Sequence[str]) -> DaemonConfig | None:
    """Parse argv and the config file into a DaemonConfig; None means "printed the version"."""
    ns = vars(build_parser().parse_args(argv))
    if ns.pop("version", False):
        print(f"svc version {SVC_VERSION}, API {API_VERSION_STR}")
        return None
    for multi in ("log_opts", "cluster_store_opts"):
        if multi in ns:
            ns[multi] = dict(ns[multi])
    explicit_file = "config_file" in ns
    config_file: Path = ns.pop("config_file", DEFAULT_CONFIG_FILE)
    flags = {_DEST_TO_KEY.get(k, k): v for k, v in ns.items()}
    file_values = _read_config_file(config_file, required=explicit_file)
    both = sorted(set(flags) & set(file_values))
    if both:
        raise ConfigError(
            "the following directives are specified both as a flag and in the configuration "
            f"file ({config_file}): {', '.join(both)}"
        )
    try:
        return DaemonConfig.model_validate({**file_values, **flags})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid configuration: {problems}") from None


def _read_config_file(path: Path, *, required: bool) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        if required:
            raise ConfigError(f"config file {path} does not exist") from None
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object")
    known = {f.alias for f in DaemonConfig.model_fields.values() if f.alias}
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        canon = FILE_KEY_SYNONYMS.get(key, key)
        if canon not in known:
            raise ConfigError(f"config file {path}: unknown directive {key!r}")
        if canon in spelled:
            raise ConfigError(f"config file {path}: {spelled[canon]!r} and {key!r} set the "
                              "same directive")
        spelled[canon] = key
        if canon == "hosts" and isinstance(value, str):
            value = [value]
        out[canon] = value
    return out


def main(
    argv: Sequence[str] | None = None,
    *,
    extensions: Sequence[Callable[..., None]] = (),
) -> int:
    """Entry point of ``svcd``. ``extensions`` let test harnesses add routes to the app."""
    from svc.daemon import DaemonError, run_daemon

    try:
        config = load_config(sys.argv[1:] if argv is None else argv)
    except ConfigError as exc:
        print(f"svcd: {exc}", file=sys.stderr)
        return 2
    if config is None:
        return 0
    try:
        run_daemon(config, extensions=extensions)
    except DaemonError as exc:
        print(f"svcd: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
