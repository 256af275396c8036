#!/usr/bin/env bash
# The main job on the shipped samples: summarise, validate, export, replay and what-if the real
# 8-rank DLRM job; simulate GPT workload configs against published step times; diff predicted
# against measured. Outputs go to out/.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh"
cd "$root"
ev() { echo; echo "\$ echo-view $*"; "$root/.venv/bin/echo-view" "$@"; }
mkdir -p out

# 1. What happened in the measured job.
ev info samples/dlrm_kineto
ev check samples/dlrm_kineto --ignore EV402 || true   # exit 1: real traces have real findings
ev export samples/dlrm_kineto -o out/dlrm.json.gz
ev export samples/dlrm_kineto -o out/dlrm.pftrace
ev info samples/nsys/mfu_2gpu_before.sqlite.gz

# 2. Replay the measured job, then ask what-if.
ev simulate samples/dlrm_kineto -o out/dlrm_replay.json.gz
ev simulate samples/dlrm_kineto --comm model
ev simulate samples/dlrm_kineto --comm model --set cluster.nvlink_gbps=600 --set compute.scale.gemm=0.5

# 3. Predicted vs measured.
ev diff out/dlrm_replay.json.gz samples/dlrm_kineto --plot out/dlrm_diff.png

# 4. Workload configs: GPT jobs no one here has a cluster for, against published step times.
ev simulate samples/configs/validation/korthikanti-175b-selective.toml
ev simulate samples/configs/validation/megatron-ci-7b-tp4-pp1.toml -o out/gpt7b_predicted.pftrace
ev simulate samples/configs/echo-gpt175b-96xH800.toml
ev comm all_reduce --bytes 64MiB --ranks 16 --gpus-per-node 8 --gpu A100

cat <<'TXT'

Next:
  Perfetto UI: open https://ui.perfetto.dev and drop out/dlrm.pftrace, out/dlrm.json.gz or
               out/gpt7b_predicted.pftrace on it ("Open trace file").
  Terminal UI: .venv/bin/echo-view tui samples/dlrm_kineto
               .venv/bin/echo-view tui out/dlrm_replay.json.gz samples/dlrm_kineto   (diff view)
               press ? for every key binding.
  Accuracy:    .venv/bin/python bench/step_accuracy.py --markdown   (docs/accuracy.md)
TXT
