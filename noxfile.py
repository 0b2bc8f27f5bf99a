"""Developer sessions. They use the repository's .venv (made by scripts/setup.sh)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests"]
PY = ".venv/bin/python"


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The whole test suite (the same command .ci/run and the README use)."""
    session.run("bash", "scripts/test.sh", *session.posargs, external=True)


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff and mypy over the package, tests and benchmarks."""
    session.run(".venv/bin/ruff", "check", "svc", "tests", "bench", "noxfile.py", external=True)
    session.run(".venv/bin/mypy", "svc", external=True)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """The benchmarks, each figure printed beside its floor or target."""
    session.run(PY, "bench/run.py", *session.posargs, external=True)
