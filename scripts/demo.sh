#!/usr/bin/env bash
# The main job on the shipped samples: summarise, validate, export and replay the real 8-rank
# DLRM job and ask what bounds its step; predict GPT jobs no one here has a cluster for, check
# them against published step times and ask a what-if that moves them; diff predicted against
# measured. Outputs go to out/. Needs no torch (the samples ship their traced graphs).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/env.sh" plot
cd "$root"
section() { printf '\n\n==== %s\n' "$*"; }
ev() { echo; echo "\$ echo-view $*"; "$root/.venv/bin/echo-view" "$@"; }
mkdir -p out

section "1. What happened in a measured job: 8 ranks of DLRM on V100 (samples/dlrm_kineto)"
ev info samples/dlrm_kineto
ev check samples/dlrm_kineto   # warnings only: real traces have real findings
ev export samples/dlrm_kineto -o out/dlrm.json.gz
ev export samples/dlrm_kineto -o out/dlrm.pftrace
ev info samples/nsys/mfu_2gpu_before.sqlite.gz

section "2. Replay it and ask what bounds its step (here: the CPU that launches the kernels)"
ev simulate samples/dlrm_kineto -o out/dlrm_replay.json.gz
ev simulate samples/dlrm_kineto --set compute.scale.cpu=0.5   # what-if: a 2x faster host CPU

section "3. Predicted vs measured"
ev diff out/dlrm_replay.json.gz samples/dlrm_kineto --plot out/dlrm_diff.png

section "4. GPT jobs from a config, against published step times"
ev simulate samples/configs/validation/korthikanti-175b-selective.toml
ev simulate samples/configs/validation/megatron-ci-7b-tp4-pp1.toml -o out/gpt7b_predicted.pftrace

section "5. GPT-175B on 96 H800 (bf16): its step, and the same job with H100's NVLink (450 GB/s)"
ev simulate samples/configs/echo-gpt175b-96xH800.toml
ev simulate samples/configs/echo-gpt175b-96xH800.toml --set cluster.nvlink_gbytes_per_s=450

section "6. One NCCL collective from the model: time, algorithm, protocol, bus bandwidth"
ev comm all_reduce --bytes 64MiB --ranks 16 --gpus-per-node 8 --gpu A100

cat <<'TXT'


==== Next
  Perfetto UI: open https://ui.perfetto.dev and drop out/dlrm.pftrace, out/dlrm.json.gz or
               out/gpt7b_predicted.pftrace on it ("Open trace file").
  Terminal UI: .venv/bin/echo-view tui samples/dlrm_kineto
               .venv/bin/echo-view tui out/dlrm_replay.json.gz samples/dlrm_kineto   (diff view)
               press ? for every key binding.
  Accuracy:    .venv/bin/python bench/step_accuracy.py --markdown   (docs/accuracy.md)
  New configs: .venv/bin/pip install -e '.[trace]' (torch), then echo-view trace CONFIG.toml -o G.json.gz
TXT
