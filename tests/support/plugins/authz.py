"""An authorization plugin with rules: ``AuthZPlugin.AuthZReq`` and ``AuthZPlugin.AuthZRes``.

The rules are a JSON list in ``<state>/rules.json``, read at every call (a test changes them
while the daemon runs); ``--arg rules=<JSON>`` writes that file at start. The first rule that
matches a call decides; with none, the call is allowed. A rule's keys:

- to match (all optional): ``phase`` (``"req"`` or ``"res"``; both without it), ``user``
  (exact; ``""`` matches a call without a user), ``method`` (exact), ``uri`` (a regular
  expression searched in ``RequestUri``);
- to answer: ``allow`` (default false) and ``msg``; or ``err`` with ``code`` (default 500):
  an error answer ``{"Err": err}`` with that status (``code`` 200: a 200 carrying ``Err``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

IMPLEMENTS = ["authz"]


def make(state: Path, args: dict[str, str]) -> dict[str, Any]:
    rules_file = state / "rules.json"
    if "rules" in args:
        rules_file.write_text(args["rules"])

    def rules() -> list[dict[str, Any]]:
        try:
            return list(json.loads(rules_file.read_text()))
        except (OSError, ValueError):
            return []

    def matches(rule: dict[str, Any], phase: str, body: dict[str, Any]) -> bool:
        return (rule.get("phase", phase) == phase
                and rule.get("user", body.get("User", "")) == body.get("User", "")
                and rule.get("method", body.get("RequestMethod")) == body.get("RequestMethod")
                and re.search(rule.get("uri", ""), body.get("RequestUri", "")) is not None)

    def decide(phase: str, body: dict[str, Any]) -> tuple[int, Any]:
        for rule in rules():
            if matches(rule, phase, body):
                if "err" in rule:
                    return int(rule.get("code", 500)), {"Err": rule["err"]}
                return 200, {"Allow": bool(rule.get("allow", False)),
                             "Msg": rule.get("msg", "")}
        return 200, {"Allow": True}

    return {"AuthZPlugin.AuthZReq": lambda body: decide("req", body),
            "AuthZPlugin.AuthZRes": lambda body: decide("res", body)}
