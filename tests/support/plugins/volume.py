"""A volume plugin backed by a directory: what a plugin written for Docker 1.11 does.

Each volume is ``<state>/volumes/<name>/``; its Mountpoint is that directory. Mounts are counted
per ``ID`` (the container's id): ``Mount`` adds one, ``Unmount`` takes one (an ``ID`` it does not
know is ignored, as a careful plugin does). The volumes, their options and the counts live in
``<state>/volumes.json`` (written atomically at each change), so a restarted plugin process
keeps them, and a test reads them with ``read_state``.

Refusals, as plugins of that generation answered them (200 with ``Err``, or 500 with it):

- ``Create`` with option ``refuse=<words>`` answers ``{"Err": <words>}``;
- ``Remove`` of a volume mounted for any ID: ``volume <name> is in use``;
- ``Get``/``Path``/``Mount``/``Remove`` of an unknown volume: ``no such volume: <name>``;
- ``Mount`` of a volume created with ``mount-refuse=<words>``: ``{"Err": <words>}``.

``--arg scope=global`` makes ``Capabilities`` answer that scope; ``--arg capabilities=none``
leaves ``Capabilities`` out (a 404, as from a 1.11 plugin); ``--arg err-status=200`` answers
refusals with 200 (else 500).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

IMPLEMENTS = ["VolumeDriver"]


def read_state(state: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((state / "volumes.json").read_text()))
    except FileNotFoundError:
        return {}


def mount_count(state: Path, name: str) -> int:
    """All mounts of ``name`` the plugin counts now (every ID)."""
    v = read_state(state).get(name)
    return sum(v["mounts"].values()) if v else 0


def make(state: Path, args: dict[str, str]) -> dict[str, Any]:
    lock = threading.Lock()
    root = state / "volumes"
    root.mkdir(parents=True, exist_ok=True)
    err_status = int(args.get("err-status", "500"))

    def save(vols: dict[str, Any]) -> None:
        tmp = state / "volumes.json.tmp"
        tmp.write_text(json.dumps(vols, sort_keys=True))
        os.replace(tmp, state / "volumes.json")

    def refuse(words: str) -> tuple[int, Any]:
        return err_status, {"Err": words}

    def create(body: dict[str, Any]) -> tuple[int, Any]:
        name, opts = body["Name"], body.get("Opts")
        if opts and "refuse" in opts:
            return refuse(opts["refuse"])
        with lock:
            vols = read_state(state)
            vols.setdefault(name, {"opts": opts, "mounts": {}})
            (root / name).mkdir(exist_ok=True)
            save(vols)
        return 200, {"Err": ""}

    def remove(body: dict[str, Any]) -> tuple[int, Any]:
        name = body["Name"]
        with lock:
            vols = read_state(state)
            if name not in vols:
                return refuse(f"no such volume: {name}")
            if any(vols[name]["mounts"].values()):
                return refuse(f"volume {name} is in use")
            del vols[name]
            save(vols)
        shutil.rmtree(root / name, ignore_errors=True)
        return 200, {"Err": ""}

    def mount(body: dict[str, Any]) -> tuple[int, Any]:
        name, cid = body["Name"], str(body.get("ID") or "")
        with lock:
            vols = read_state(state)
            if name not in vols:
                return refuse(f"no such volume: {name}")
            opts = vols[name].get("opts") or {}
            if "mount-refuse" in opts:
                return refuse(opts["mount-refuse"])
            vols[name]["mounts"][cid] = vols[name]["mounts"].get(cid, 0) + 1
            save(vols)
        return 200, {"Mountpoint": str(root / name), "Err": ""}

    def unmount(body: dict[str, Any]) -> tuple[int, Any]:
        name, cid = body["Name"], str(body.get("ID") or "")
        with lock:
            vols = read_state(state)
            if name not in vols:
                return refuse(f"no such volume: {name}")
            mounts = vols[name]["mounts"]
            if mounts.get(cid, 0) > 1:
                mounts[cid] -= 1
            else:
                mounts.pop(cid, None)
            save(vols)
        return 200, {"Err": ""}

    def path(body: dict[str, Any]) -> tuple[int, Any]:
        name = body["Name"]
        if name not in read_state(state):
            return refuse(f"no such volume: {name}")
        return 200, {"Mountpoint": str(root / name), "Err": ""}

    def get(body: dict[str, Any]) -> tuple[int, Any]:
        name = body["Name"]
        v = read_state(state).get(name)
        if v is None:
            return refuse(f"no such volume: {name}")
        return 200, {"Volume": {"Name": name, "Mountpoint": str(root / name),
                                "Status": {"mounts": sum(v["mounts"].values())}},
                     "Err": ""}

    def list_(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"Volumes": [{"Name": n, "Mountpoint": str(root / n)}
                                 for n in sorted(read_state(state))], "Err": ""}

    def capabilities(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, {"Capabilities": {"Scope": args.get("scope", "local")}}

    out = {"VolumeDriver.Create": create, "VolumeDriver.Remove": remove,
           "VolumeDriver.Mount": mount, "VolumeDriver.Unmount": unmount,
           "VolumeDriver.Path": path, "VolumeDriver.Get": get, "VolumeDriver.List": list_,
           "VolumeDriver.Capabilities": capabilities}
    if args.get("capabilities") == "none":
        del out["VolumeDriver.Capabilities"]
    return out
