#!/usr/bin/env bash
# Install k3rollout into .venv and run a whole rollout on the embedded simulated cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
exec .venv/bin/k3rollout demo "$@"
