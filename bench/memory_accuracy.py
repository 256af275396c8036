"""Per-GPU memory of echo-view's memory model (``echo_view.sim.memory``) against published
figures, printed as the markdown table of docs/accuracy.md.

    python bench/memory_accuracy.py

Each row is a published run or figure: its model, layout and what the source measured. Sources
(all public):

- torchtitan, ``docs/performance.md`` of pytorch/torchtitan (Liang et al. 2024, arXiv
  2410.06511), Tables 1 and 2: Llama 3.1 8B on 8 H100 (96 GB), FSDP2; "Memory (GiB)" is the
  peak memory PyTorch's caching allocator reserved (torchtitan logs ``max_reserved``). Compared
  with the model's peak times (1 + the allocator margin).
- ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054), Figure 1: model states (weights, gradients,
  Adam states) of a 7.5B-parameter model per GPU on 64 GPUs, fp16 mixed precision: 120 GB
  unsharded, 31.4 GB with optimizer sharding, 1.9 GB fully sharded. Compared with the model's
  weights + gradients + optimizer states; the fully sharded stage as ``fsdp = "full_shard"``
  (PyTorch FSDP's ``FULL_SHARD`` is ZeRO-3), the other two with the sharding given directly
  (Megatron-LM's accounting: no configuration describes DeepSpeed's).
- torchtitan's runs as ``fsdp = "full_shard"`` (FSDP2, every state sharded).
- Megatron-LM CI golden values (NVIDIA/Megatron-LM @ d98e8a64,
  ``tests/functional_tests/test_cases/gpt/<case>/golden_values_dev_dgx_h100.json``, copies in
  ``../shared/data/megatron-lm-functional-tests``): ``mem-max-allocated-bytes`` (the most over
  the logged iterations; ``torch.cuda.max_memory_allocated``) against the model's peak (no
  allocator margin: allocated, not reserved), and ``mem-allocated-bytes`` between steps against
  weights + gradients + optimizer states, for the 7B runs ``samples/configs/validation/
  megatron-ci-7b-*.toml`` and the 12-layer, hidden-512 runs of
  ``samples/configs/megatron-ci-small``. The logging rank is the last one: Megatron-LM opens its
  TensorBoard writer on global rank ``world_size - 1`` only (``_set_tensorboard_writer`` in
  ``megatron/training/global_vars.py``), which its rank order (pipeline outermost) puts on the
  last pipeline stage, so that stage is compared.
- Megatron-LM's distributed-optimizer guide (NVIDIA/Megatron-LM,
  ``docs/source/api-guide/dist_optimizer.md``): bytes per parameter per GPU, 18 (bf16 params,
  fp32 grads) and 6 + 12/d with the distributed optimizer (here d = 8, 7.5 bytes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.loading import load_config  # noqa: E402
from echo_view.model.config import WorkloadConfig  # noqa: E402
from echo_view.model.config_parse import parse_workload_config  # noqa: E402
from echo_view.sim.memory import ALLOCATOR_MARGIN, memory_report  # noqa: E402

GiB = 1 << 30
GB = 10**9

LLAMA31_8B = {
    "kind": "gpt", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336,
    "vocab": 128256, "activation": "swiglu", "normalization": "rmsnorm", "position": "rope",
    "tie_embeddings": False,
}  # fmt: skip
#: PyTorch FSDP with every state sharded (``FULL_SHARD``, ZeRO-3): torchtitan's FSDP2 runs and
#: ZeRO's fully sharded stage, which FSDP implements.
FSDP = {"fsdp": "full_shard"}
#: A GPT with 7.5 billion parameters (36 layers of 12 h^2 with h = 4096, plus embeddings).
GPT_7B5 = {"kind": "gpt", "layers": 36, "hidden": 4096, "heads": 32, "vocab": 51200}

#: (config under samples/configs, CI case, most mem-max-allocated-bytes, mem-allocated-bytes).
MEGATRON_CI = [
    ("validation/megatron-ci-7b-tp4-pp1.toml", "gpt3_7b_tp4_pp1_memory_speed", 57143791616,
     20663519232),
    ("validation/megatron-ci-7b-tp1-pp4.toml", "gpt3_7b_tp1_pp4_memory_speed", 60720852992,
     24808996864),
    ("megatron-ci-small/tp1-pp2.toml", "gpt3_mcore_tp1_pp2", 3633177600, 948653056),
    ("megatron-ci-small/tp1-pp4.toml", "gpt3_mcore_tp1_pp4", 2746575872, 778948608),
]  # fmt: skip


def _cfg(model: dict[str, Any], seq: int, parallel: dict[str, Any], micro: int, dtype: str) -> Any:
    gpus = parallel.get("tp", 1) * parallel.get("pp", 1) * parallel["dp"] * parallel.get("cp", 1)
    data = {
        "model": {**model, "seq_len": seq},
        "parallel": {"tp": 1, "pp": 1, **parallel},
        "batch": {"global": micro * parallel["dp"], "micro": micro},
        "cluster": {"gpu": "H100", "gpus_per_node": min(gpus, 8), "nodes": max(1, gpus // 8)},
        "precision": {"dtype": dtype},
    }
    return parse_workload_config(data, "bench/memory_accuracy.py")


@dataclass(frozen=True)
class Point:
    source: str
    run: str
    cfg: WorkloadConfig
    sharding: str | None
    #: "reserved" (allocator's peak), "allocated" (tensors' peak) or "states" (weights +
    #: grads + optimizer)
    what: str
    published_bytes: float
    unit: str
    #: the pipeline stage whose memory the source reports: "peak" (the model's largest) or
    #: "last" (the stage of the logging rank)
    stage: str = "peak"


def points() -> list[Point]:
    out = [
        Point(
            "torchtitan Table 1", "Llama 3.1 8B, 8 H100, FSDP 8, mb 2, seq 8192, selective AC",
            _cfg(LLAMA31_8B, 8192, {"dp": 8, "recompute": "selective", **FSDP}, 2, "bf16"),
            None, "reserved", 82.4 * GiB, "GiB",
        ),
    ]  # fmt: skip
    for dp, cp, seq, gib in ((8, 1, 32768, 83.9), (4, 2, 65536, 84.2), (2, 4, 131072, 84.0)):
        out.append(
            Point(
                "torchtitan Table 2",
                f"Llama 3.1 8B, 8 H100, FSDP {dp} CP {cp}, seq {seq}, full AC, fp8",
                _cfg(LLAMA31_8B, seq, {"dp": dp, "cp": cp, "recompute": "full", **FSDP}, 1, "fp8"),
                None,
                "reserved",
                gib * GiB,
                "GiB",
            )
        )
    configs = ROOT / "samples" / "configs"
    for name, case, max_alloc, alloc in MEGATRON_CI:
        cfg = load_config(configs / name)
        run = f"Megatron-LM CI {case}"
        for what, published in (("allocated", max_alloc), ("states", alloc)):
            out.append(Point("Megatron-LM CI", run, cfg, None, what, published, "GiB", "last"))
    zero = _cfg(GPT_7B5, 1024, {"dp": 64}, 1, "fp16")
    zero3 = _cfg(GPT_7B5, 1024, {"dp": 64, **FSDP}, 1, "fp16")
    for cfg, sharding, gb, name in ((zero, "none", 120, "baseline"),
                                    (zero, "optimizer", 31.4, "P_os"),
                                    (zero3, None, 1.9, "P_os+g+p")):  # fmt: skip
        out.append(
            Point(
                "ZeRO Figure 1",
                f"7.5B, 64 GPUs, fp16, {name}",
                cfg,
                sharding,
                "states",
                gb * GB,
                "GB",
            )
        )
    meg = _cfg(GPT_7B5, 1024, {"dp": 8, "distributed_optimizer": True}, 1, "bf16")
    plain = _cfg(GPT_7B5, 1024, {"dp": 8}, 1, "bf16")
    params = _params(plain)
    out.append(Point("Megatron-LM dist. optimizer guide", "bf16, fp32 grads: 18 B/param", plain,
                     None, "states", 18 * params, "GB"))  # fmt: skip
    out.append(Point("Megatron-LM dist. optimizer guide", "distributed optimizer, d = 8: "
                     "6 + 12/8 B/param", meg, None, "states", 7.5 * params, "GB"))  # fmt: skip
    return out


def _params(cfg: WorkloadConfig) -> int:
    from echo_view.sim.memory import stage_params

    return stage_params(cfg, 0)


def modelled(p: Point) -> float:
    rep = memory_report(p.cfg, 96 * GB, p.sharding)
    peak = rep.stages[-1] if p.stage == "last" else rep.peak
    if p.what == "states":
        return float(peak.weights + peak.grads + peak.optimizer)
    if p.what == "allocated":
        return float(peak.peak)
    return peak.peak * (1 + ALLOCATOR_MARGIN)


def main() -> int:
    print("| source | run | compared | published | echo-view | error |")
    print("|---|---|---|---:|---:|---:|")
    errors = []
    for p in points():
        unit = GiB if p.unit == "GiB" else GB
        got = modelled(p)
        err = 100 * (got - p.published_bytes) / p.published_bytes
        errors.append(abs(err))
        print(
            f"| {p.source} | {p.run} | {p.what} | {p.published_bytes / unit:.1f} {p.unit} | "
            f"{got / unit:.1f} {p.unit} | {err:+.1f}% |"
        )
    within = sum(e <= 10 for e in errors)
    print(f"\n{within} of {len(errors)} within 10%; mean |error| {sum(errors) / len(errors):.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
