#!/usr/bin/env bash
# The whole test suite: lint, then pytest (the SLURM tests start their own single-node cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check src tests benchmarks
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
