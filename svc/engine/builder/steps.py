"""The instructions, one handler each, as the legacy builder dispatched them: ``Step N :``
with the raw arguments, then the arguments expanded (for the instructions that expand
variables), then the handler. Metadata instructions change the run configuration and commit
an image without a layer whose ``container_config`` carries ``#(nop) <instruction>``; RUN,
COPY and ADD work in containers (``svc.engine.builder.containers``)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from svc.engine.builder import containers as ctr
from svc.engine.builder import imaging
from svc.engine.builder.base import base_image
from svc.engine.builder.job import Job
from svc.engine.builder.output import StepFailed
from svc.engine.networks.ports import parse_port
from svc.runtime.process import signal_number
from svc.svcfile.parser import Instruction, go_quote, parse
from svc.svcfile.shellwords import SubstitutionError, expand_word, expand_words

Handler = Callable[[Job, Instruction, list[str]], Awaitable[None]]

# Instructions whose arguments see $VARIABLES (EXPOSE also splits them into words).
EXPANDS = frozenset({"env", "label", "add", "copy", "workdir", "expose", "volume", "user",
                     "stopsignal", "arg"})
# Instructions that run on an image still being made (``Job.pending``): the rest wait for it.
RUNS_ON_PENDING = frozenset({"run"})
_ONBUILD_PREFIX = re.compile(r"(?i)^\s*ONBUILD\s*")


def step_message(n: int, inst: Instruction) -> str:
    if not inst.start_line and inst.original:  # made by the builder (the labels parameter)
        return f"Step {n} : {inst.original}"
    msg = f"Step {n} : {inst.cmd.upper()}"
    if inst.flags:
        msg += " " + " ".join(inst.flags)
    if inst.sub is not None:
        msg += f" {inst.sub.cmd.upper()}"
        if inst.sub.flags:
            msg += " " + " ".join(inst.sub.flags)
        return msg + " " + " ".join(inst.sub.args)
    return msg + " " + " ".join(inst.args)


def expand(job: Job, inst: Instruction) -> list[str]:
    if inst.cmd not in EXPANDS:
        return list(inst.args)
    env = job.expansion_env()
    out: list[str] = []
    try:
        for a in inst.args:
            if inst.cmd == "expose":
                out += expand_words(a, env, job.escape)
            else:
                out.append(expand_word(a, env, job.escape))
    except SubstitutionError as exc:
        raise StepFailed(str(exc)) from None
    return out


async def dispatch(job: Job, n: int, inst: Instruction) -> None:
    """Run one instruction (``n`` counts from 1)."""
    await job.out.line(step_message(n, inst))
    handler = HANDLERS.get(inst.cmd)
    if handler is None:
        raise StepFailed(f"Unknown instruction: {inst.cmd.upper()}")
    flags_ok = {"copy": ("chown",), "add": ("chown",)}.get(inst.cmd, ())
    for flag in inst.flags:
        name = flag.removeprefix("--").partition("=")[0]
        if name not in flags_ok:
            raise StepFailed(f"Unknown flag: {name}")
    if inst.cmd not in RUNS_ON_PENDING:
        await job.settle()
    await handler(job, inst, expand(job, inst))


def _go_list(items: list[str]) -> str:
    """A list as Go's ``%q`` prints it (``["a" "b"]``), as engines wrote CMD's cache key."""
    return "[" + " ".join(go_quote(i) for i in items) + "]"


async def _from(job: Job, inst: Instruction, args: list[str]) -> None:
    if len(args) != 1:
        raise StepFailed("FROM requires one argument")
    name = args[0]
    if len(name.split()) > 1:
        raise StepFailed(f"FROM takes one image name, not {name!r}: multi-stage builds "
                         "(FROM ... AS ...) came after the legacy builder")
    if name == "scratch":
        job.image, job.scratch = await job.scratch_base(), True
    else:
        job.image, job.scratch = await base_image(job, name), False
    job.config = imaging.base_config(job.image)
    job.config.Image = job.image.id
    job.cmd_set = False
    triggers = list(job.config.OnBuild or [])
    job.config.OnBuild = []
    if triggers:
        word = "trigger" if len(triggers) == 1 else "triggers"
        await job.out.stderr(f"# Executing {len(triggers)} build {word}...\n")
    for text in triggers:
        for i, sub in enumerate(parse(text).instructions):
            if sub.cmd in ("onbuild", "maintainer", "from"):
                raise StepFailed(f"{sub.cmd.upper()} isn't allowed as an ONBUILD trigger")
            await dispatch(job, i + 1, sub)


async def _maintainer(job: Job, inst: Instruction, args: list[str]) -> None:
    if len(args) != 1:
        raise StepFailed("MAINTAINER requires exactly one argument")
    job.author = args[0]
    await job.commit_metadata(f"MAINTAINER {job.author}")


def _pairs(args: list[str], what: str) -> list[tuple[str, str]]:
    if not args:
        raise StepFailed(f"{what} requires at least one argument")
    if len(args) % 2:
        raise StepFailed(f"Bad input to {what}, too many arguments")
    return [(args[i], args[i + 1]) for i in range(0, len(args), 2)]


async def _env(job: Job, inst: Instruction, args: list[str]) -> None:
    env = list(job.config.Env or [])
    text = "ENV"
    for key, value in _pairs(args, "ENV"):
        if not key:
            raise StepFailed("ENV names must not be empty")
        entry = f"{key}={value}"
        text += " " + entry
        env = _set_env(env, key, entry)
    job.config.Env = env
    await job.commit_metadata(text)


def _set_env(env: list[str], key: str, entry: str) -> list[str]:
    """``entry`` in place of ``key``'s definition (where 1.11 kept it), else at the end."""
    names = [e.partition("=")[0] for e in env]
    if key not in names:
        return [*env, entry]
    return [entry if name == key else e for name, e in zip(names, env, strict=True)]


async def _label(job: Job, inst: Instruction, args: list[str]) -> None:
    labels = dict(job.config.Labels or {})
    text = "LABEL"
    for key, value in _pairs(args, "LABEL"):
        if not key:
            raise StepFailed("LABEL names must not be empty")
        labels[key] = value
        text += f" {key}={value}"
    job.config.Labels = labels
    await job.commit_metadata(text)


def _command(inst: Instruction, args: list[str]) -> list[str]:
    return list(args) if inst.json else [*imaging.SHELL, " ".join(args)]


async def _cmd(job: Job, inst: Instruction, args: list[str]) -> None:
    cmd = _command(inst, args)
    job.config.Cmd = cmd
    job.cmd_set = bool(args)
    await job.commit_metadata(f"CMD {_go_list(cmd)}")


async def _entrypoint(job: Job, inst: Instruction, args: list[str]) -> None:
    if inst.json:
        job.config.Entrypoint = list(args)
    elif not args or not args[0]:
        job.config.Entrypoint = None
    else:
        job.config.Entrypoint = [*imaging.SHELL, args[0]]
    if not job.cmd_set:
        job.config.Cmd = None
    await job.commit_metadata(f"ENTRYPOINT {_go_list(job.config.Entrypoint or [])}")


async def _expose(job: Job, inst: Instruction, args: list[str]) -> None:
    if not args:
        raise StepFailed("EXPOSE requires at least one argument")
    ports = dict(job.config.ExposedPorts or {})
    new: list[str] = []
    for spec in args:
        port, _, proto = spec.partition("/")
        lo, _, hi = port.partition("-")
        try:
            numbers = range(int(lo), int(hi or lo) + 1)
        except ValueError:
            raise StepFailed(f"Invalid containerPort: {spec}") from None
        if not numbers:
            raise StepFailed(f"Invalid range specified for the Port: {port} (its end is below "
                             "its start)")
        for p in numbers:
            number, kind = parse_port(f"{p}/{proto or 'tcp'}")
            new.append(f"{number}/{kind}")
    for key in new:
        ports[key] = {}
    job.config.ExposedPorts = ports
    await job.commit_metadata("EXPOSE " + " ".join(sorted(set(new))))


async def _volume(job: Job, inst: Instruction, args: list[str]) -> None:
    if not args:
        raise StepFailed("VOLUME requires at least one argument")
    volumes = dict(job.config.Volumes or {})
    for v in args:
        if not v.strip():
            raise StepFailed("Volume specified can not be an empty string")
        volumes[v.strip()] = {}
    job.config.Volumes = volumes
    await job.commit_metadata(f"VOLUME [{' '.join(args)}]")


async def _user(job: Job, inst: Instruction, args: list[str]) -> None:
    if len(args) != 1:
        raise StepFailed("USER requires exactly one argument")
    job.config.User = args[0]
    await job.commit_metadata(f"USER {args[0]}")


async def _workdir(job: Job, inst: Instruction, args: list[str]) -> None:
    if len(args) != 1 or not args[0]:
        raise StepFailed("WORKDIR requires exactly one argument")
    current = str(job.config.WorkingDir or "/")
    job.config.WorkingDir = ctr.destination(args[0], current).rstrip("/") or "/"
    await job.commit_metadata(f"WORKDIR {job.config.WorkingDir}")


async def _stopsignal(job: Job, inst: Instruction, args: list[str]) -> None:
    if len(args) != 1:
        raise StepFailed("STOPSIGNAL requires exactly one argument")
    try:
        signal_number(args[0])
    except ValueError:
        raise StepFailed(f"Invalid signal: {args[0]}") from None
    job.config.StopSignal = args[0]
    await job.commit_metadata(f"STOPSIGNAL {args[0]}")


async def _arg(job: Job, inst: Instruction, args: list[str]) -> None:
    if len(args) != 1:
        raise StepFailed("ARG requires exactly one argument definition")
    name, has_default, default = args[0].partition("=")
    if not name:
        raise StepFailed("ARG names can not be blank")
    job.allowed.add(name)
    if has_default and job.buildargs.get(name) is None:
        job.buildargs[name] = default
    await job.commit_metadata(f"ARG {args[0]}")


async def _onbuild(job: Job, inst: Instruction, args: list[str]) -> None:
    if inst.sub is None:
        raise StepFailed("ONBUILD requires at least one argument")
    if inst.sub.cmd in ("onbuild", "maintainer", "from"):
        what = "Chaining ONBUILD via `ONBUILD ONBUILD`" if inst.sub.cmd == "onbuild" \
            else f"{inst.sub.cmd.upper()} as an ONBUILD trigger"
        raise StepFailed(f"{what} isn't allowed")
    trigger = _ONBUILD_PREFIX.sub("", inst.original, count=1).strip()
    job.config.OnBuild = [*(job.config.OnBuild or []), trigger]
    await job.commit_metadata(f"ONBUILD {trigger}")


async def _run(job: Job, inst: Instruction, args: list[str]) -> None:
    if not args:
        raise StepFailed("RUN requires at least one argument")
    await ctr.run_step(job, _command(inst, args))


async def _copy(job: Job, inst: Instruction, args: list[str]) -> None:
    await ctr.copy_step(job, inst, args)


HANDLERS: dict[str, Handler] = {
    "from": _from, "maintainer": _maintainer, "env": _env, "label": _label, "cmd": _cmd,
    "entrypoint": _entrypoint, "expose": _expose, "volume": _volume, "user": _user,
    "workdir": _workdir, "stopsignal": _stopsignal, "arg": _arg, "onbuild": _onbuild,
    "run": _run, "copy": _copy, "add": _copy,
}
