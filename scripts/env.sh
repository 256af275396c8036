#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install echo-view into it.
# Sourced by scripts/demo.sh and scripts/check.sh; safe to run on its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.echo-view-installed"
want="$(cat "$root/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -x "$venv/bin/python" ]; then
  echo "echo-view: creating $venv" >&2
  "$python" -m venv "$venv"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "echo-view: installing echo-view and its test tools into $venv (first run only)" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[dev,plot,trace]"
  echo "$want" > "$stamp"
fi
