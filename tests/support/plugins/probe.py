"""A plugin that only answers ``Probe.*`` calls: for the tests of discovery and calls.

``Probe.Echo`` answers its body; ``Probe.Refuse`` answers ``{"Err": <body's Err>}`` with the
body's ``Status`` (500 by default); ``Probe.Text`` answers a refusal that is not JSON.
``--arg implements=A,B`` sets what ``Plugin.Activate`` says it implements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

IMPLEMENTS = ["Probe"]


def make(state: Path, args: dict[str, str]) -> dict[str, Any]:
    def echo(body: dict[str, Any]) -> tuple[int, Any]:
        return 200, body

    def refuse(body: dict[str, Any]) -> tuple[int, Any]:
        return int(body.get("Status", 500)), {"Err": body.get("Err", "")}

    def text(body: dict[str, Any]) -> tuple[int, Any]:
        return 500, "plain words"

    return {"Probe.Echo": echo, "Probe.Refuse": refuse, "Probe.Text": text}
