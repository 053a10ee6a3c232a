#!/usr/bin/env bash
# Run the test suite in the environment scripts/install.sh made (.venv), from any shell: no activation needed.
# Extra arguments go to pytest (e.g. `bash scripts/test.sh -m slow` for the slow tests).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  echo "test.sh: no .venv here; run 'bash scripts/install.sh' first" >&2
  exit 2
fi
# Tools the tests start as subprocesses by bare name (python, jupiter, ray) resolve to this environment too.
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest "$@"
