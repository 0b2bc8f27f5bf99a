"""``HostConfig.SecurityOpt``: seccomp, no-new-privileges, AppArmor and SELinux labels.

Both spellings clients send are taken: ``key:value`` (the 1.10/1.11 CLI) and ``key=value``
(later ones). ``seccomp`` is ``unconfined`` or the profile itself, as JSON (the CLI reads
``--security-opt seccomp=<file>`` and sends the file's content). On a host without AppArmor or
SELinux their options are kept and shown but do nothing, and the create answers a Warning
saying so; dockerd of that generation ignored them silently. An option svc does not know is a
400 with dockerd's words.
"""

from __future__ import annotations

from dataclasses import dataclass

from svc.errors import InvalidParameter
from svc.runtime import host
from svc.runtime import seccomp as sc


@dataclass(frozen=True)
class SecurityOptions:
    seccomp: str = "default"  # "default", "unconfined" or a profile (JSON)
    no_new_privileges: bool = False
    apparmor: str = ""
    labels: tuple[str, ...] = ()


def _split(opt: str) -> tuple[str, str]:
    eq, colon = opt.find("="), opt.find(":")
    cut = min(i for i in (eq, colon) if i >= 0) if eq >= 0 or colon >= 0 else -1
    return (opt, "") if cut < 0 else (opt[:cut], opt[cut + 1:])


def parse(opts: list[str] | None) -> SecurityOptions:
    """The options, checked (``InvalidParameter`` naming the bad one)."""
    out = SecurityOptions()
    labels: list[str] = []
    for opt in opts or []:
        key, value = _split(opt)
        if key == "no-new-privileges":
            if value not in ("", "true", "false"):
                raise InvalidParameter(f"Invalid --security-opt 2: {opt!r}")
            out = SecurityOptions(out.seccomp, value != "false", out.apparmor, out.labels)
        elif key == "seccomp" and value:
            if value != "unconfined":
                try:
                    sc.parse_profile(value)
                except sc.ProfileError as exc:
                    raise InvalidParameter(str(exc)) from None
            out = SecurityOptions(value, out.no_new_privileges, out.apparmor, out.labels)
        elif key == "apparmor" and value:
            out = SecurityOptions(out.seccomp, out.no_new_privileges, value, out.labels)
        elif key == "label" and value:
            labels.append(value)
        else:
            raise InvalidParameter(f"Invalid --security-opt: {opt!r}")
    return SecurityOptions(out.seccomp, out.no_new_privileges, out.apparmor, tuple(labels))


def warnings(opts: SecurityOptions, privileged: bool) -> list[str]:
    """What this host cannot honour, as Warnings (a custom seccomp profile on a kernel
    without seccomp is an error)."""
    out = []
    if not sc.supported():
        if opts.seccomp not in ("default", "unconfined") and not privileged:
            raise InvalidParameter("seccomp is not enabled in your kernel, cannot run a custom "
                                   "seccomp profile.")
        if opts.seccomp == "default" and not privileged:
            out.append("Seccomp is not enabled in your kernel, running container without "
                       "default profile.")
    if opts.apparmor and not host.apparmor_enabled():
        out.append(f"AppArmor is not enabled on this host: the security option "
                   f"apparmor={opts.apparmor} is ignored.")
    if opts.labels and not host.selinux_enabled():
        out.append("SELinux is not enabled on this host: the security option(s) "
                   + ", ".join(f"label={x}" for x in opts.labels) + " are ignored.")
    return out
