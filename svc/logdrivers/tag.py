"""The ``tag`` log option: a Go template over the container's ``Info`` (moby's
``loggerutils.ParseLogTag``), rendered once per container.

The fields of the engines of this API generation are served: ``{{.ID}}``, ``{{.FullID}}``,
``{{.Name}}``, ``{{.ImageID}}``, ``{{.ImageFullID}}``, ``{{.ImageName}}``, ``{{.DaemonName}}``
(and ``{{.Command}}``, ``{{.Hostname}}``). Anything else between braces is refused at create
with a message naming the option.
"""

from __future__ import annotations

import re

from svc.logdrivers.base import Info, OptionError

_ACTION = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
_FIELDS = {
    ".ID": lambda i: i.id,
    ".FullID": lambda i: i.full_id,
    ".Name": lambda i: i.name,
    ".ImageID": lambda i: i.image_short_id,
    ".ImageFullID": lambda i: i.image_full_id,
    ".ImageName": lambda i: i.image_name,
    ".DaemonName": lambda i: i.daemon_name,
    ".Command": lambda i: i.command(),
    ".Hostname": lambda i: i.hostname,
}


def check_tag(template: str) -> None:
    """Refuse a template with an action other than the fields above.

    Raises:
      OptionError: naming the ``tag`` option and the action.
    """
    for m in _ACTION.finditer(template):
        if m.group(1) not in _FIELDS:
            raise OptionError(f"invalid log tag template {template!r}: {m.group(0)} is not "
                              f"one of {', '.join('{{' + f + '}}' for f in _FIELDS)}")
    rest = _ACTION.sub("", template)
    if "{{" in rest or "}}" in rest:
        raise OptionError(f"invalid log tag template {template!r}: unbalanced braces")


def render_tag(info: Info, default: str = "{{.ID}}") -> str:
    """The container's tag: the ``tag`` option (``syslog-tag``, ``gelf-tag`` and
    ``fluentd-tag`` of older engines are read too), else ``default``, rendered."""
    template = info.config.get("tag") or next(
        (info.config[k] for k in ("syslog-tag", "gelf-tag", "fluentd-tag")
         if info.config.get(k)), default)
    check_tag(template)
    return _ACTION.sub(lambda m: _FIELDS[m.group(1)](info), template)
