#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv and install echo-view into it
# with the extras given as $1 (comma-separated; default: dev,plot,trace). Extras accumulate:
# scripts/demo.sh asks for plot only (no torch), scripts/check.sh adds dev and trace.
# Sourced by scripts/demo.sh and scripts/check.sh; safe to run on its own.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
stamp="$venv/.echo-view-installed"   # "<pyproject.toml hash> <installed extras>"
hash="$(sha256sum < "$root/pyproject.toml" | cut -c1-16)"
want="${1:-dev,plot,trace}"
if [ ! -x "$venv/bin/python" ]; then
  echo "echo-view: creating $venv" >&2
  "$python" -m venv "$venv"
fi
have=""
if [ -f "$stamp" ] && [ "$(cut -d' ' -f1 "$stamp")" = "$hash" ]; then
  have="$(cut -s -d' ' -f2 "$stamp")"
fi
all="$(printf '%s\n' "${have//,/$'\n'}" "${want//,/$'\n'}" | sed '/^$/d' | sort -u | paste -sd, -)"
if [ "$all" != "$have" ]; then
  echo "echo-view: installing echo-view[$all] into $venv (first run only)" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[$all]"
  echo "$hash $all" > "$stamp"
fi
