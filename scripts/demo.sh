#!/usr/bin/env bash
# The main job on the shipped samples: summarise, validate and export the real 8-rank DLRM job.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
ev() { echo; echo "\$ echo-view $*"; "$root/.venv/bin/echo-view" "$@"; }
mkdir -p out
ev info samples/dlrm_kineto
ev export samples/dlrm_kineto -o out/dlrm.json.gz
ev export samples/dlrm_kineto -o out/dlrm.pftrace
echo
echo "Open out/dlrm.json.gz or out/dlrm.pftrace in the Perfetto UI (https://ui.perfetto.dev, 'Open trace file')."
