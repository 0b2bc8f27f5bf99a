#!/usr/bin/env bash
# Install what is needed (idempotent), then run every check: ruff, mypy, the import-layer
# contracts, the whole pytest suite, then docker-py 1.10.6's own integration suite at API
# 1.23 and 1.22 (scripts/dockerpy-suite.sh); any failure fails the script. `.ci/run` and
# `nox -s tests` run exactly this. Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
bash scripts/setup.sh

echo "== lint: ruff, mypy, import layers"
.venv/bin/ruff check svc tests bench noxfile.py
.venv/bin/mypy svc
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache

echo "== tests"
set +e
.venv/bin/pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
    code=1
fi

echo "== docker-py 1.10.6's own integration suite (API 1.23 and 1.22)"
set +e
bash scripts/dockerpy-suite.sh
suite=$?
set -e
if [ "$code" -ne 0 ]; then
    exit "$code"
fi
exit "$suite"
