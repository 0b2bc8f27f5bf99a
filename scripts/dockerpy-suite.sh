#!/usr/bin/env bash
# Run docker-py 1.10.6's own integration suite (tests/integration of its PyPI sdist, unmodified)
# against fresh svc test daemons, at API 1.23 and then 1.22: see tests/dockerpy/run.py.
# scripts/setup.sh installs what it needs (.dockerpy/, .venv-dockerpy); scripts/test.sh runs
# it after pytest. Arguments go to the runner: --api 1.23 for one version; after --, to the
# suite's pytest (e.g. -- -k exec).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec .venv/bin/python -m tests.dockerpy.run "$@"
