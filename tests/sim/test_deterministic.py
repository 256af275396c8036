"""The GPU-dependent buffer deterministic algorithms fill: cuDNN's attention workspace."""

from __future__ import annotations

from dataclasses import replace

from echo_view.model.graph import TracedGraph
from echo_view.model.strings import StringTable
from echo_view.sim.cluster import cluster_from_config
from echo_view.sim.deterministic import dp_workspace_bytes
from tests.sim.test_compose import _cfg
from tests.sim.test_compose_costs import _attention_table

FWD = ("echo_view::flash_attn", "[2,16,4096,128]x[2,4,4096,128]x[2,4,4096,128]", 1.0)
# dout and q [b 2, 16 heads, 4,096 queries, 128]; k and v [2, 4 kv heads, 1,024 keys, 128].
BWD = ("echo_view::flash_attn_bwd", "x".join(["[2,16,4096,128]"] * 2 + ["[2,4,1024,128]"] * 2), 1.0)


def _bytes(gpu: str, deterministic: bool = True, **model: str) -> list[int]:
    strings = StringTable()
    table = _attention_table(strings, [FWD, BWD])
    cfg = _cfg(pp=1, dp=1, micro_batches=1, model=model)
    cfg = replace(cfg, cluster=replace(cfg.cluster, gpu=gpu))
    cfg = replace(cfg, training=replace(cfg.training, deterministic=deterministic))
    cluster = cluster_from_config(cfg.cluster)
    return dp_workspace_bytes(TracedGraph(strings, ()), table, cfg, cluster).tolist()


def test_a_deterministic_cudnn_backward_on_hopper_needs_a_dp_workspace() -> None:
    # b x query heads x s_q x s_kv x 2 bytes, on the backward only.
    assert _bytes("H100") == [0, 2 * 16 * 4096 * 1024 * 2]
    assert _bytes("H800", attention_kernel="cudnn") == [0, 2 * 16 * 4096 * 1024 * 2]


def test_no_workspace_without_all_of_its_conditions() -> None:
    assert _bytes("H100", deterministic=False) == [0, 0]
    assert _bytes("H100", attention_kernel="fa3") == [0, 0]  # FlashAttention's kernels
    assert _bytes("A100-80GB") == [0, 0]  # auto is FlashAttention-2 there
    assert _bytes("H100", transformer_impl="local") == [0, 0]  # Megatron's own attention
