"""The log options every shipping driver shares, checked in one place: the ``tag``
templates (and the older ``syslog-tag``, ``gelf-tag``, ``fluentd-tag``), the ``labels-regex``
and ``env-regex`` patterns, and the pump's ``mode`` and ``max-buffer-size``."""

from __future__ import annotations

import re
from collections.abc import Mapping

from svc.logdrivers.base import OptionError
from svc.logdrivers.pump import buffer_options
from svc.logdrivers.tag import check_tag

TAG_KEYS = ("tag", "syslog-tag", "gelf-tag", "fluentd-tag")


def check_common(config: Mapping[str, str]) -> None:
    """Raises OptionError naming the first shared option that is malformed (a driver's
    ``validate`` calls this after refusing the keys it does not take)."""
    for key in TAG_KEYS:
        if config.get(key):
            check_tag(config[key])
    for key in ("labels-regex", "env-regex"):
        if key in config:
            try:
                re.compile(config[key])
            except re.error as exc:
                raise OptionError(f"invalid {key} {config[key]!r}: {exc}") from None
    buffer_options(dict(config))
