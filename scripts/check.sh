#!/usr/bin/env bash
# Everything CI runs: lint, format check, type check, and the test suite (layering test included).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh" dev,plot,trace   # trace: mypy checks echo_view/tracing against torch
cd "$root"
export PATH="$root/.venv/bin:$PATH"
echo "== ruff check"; ruff check .
echo "== ruff format --check"; ruff format --check .
echo "== mypy"; mypy
echo "== pytest"; python -m pytest -q -p no:cacheprovider "$@"
