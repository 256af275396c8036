"""A small MoE workload config as the TOML mapping, for the MoE tests of every package."""

from __future__ import annotations

from typing import Any


def moe_data(
    model: dict[str, Any] | None = None,
    parallel: dict[str, Any] | None = None,
    *,
    micro: int = 1,
    nodes: int = 1,
) -> dict[str, Any]:
    """Eight experts (top-2, expert FFN 32) in a 2-layer, hidden-64 SwiGLU model on 8 GPUs of
    one node with EP 4 over dp 8; ``model`` and ``parallel`` override or add keys."""
    return {
        "model": {
            "kind": "gpt",
            "layers": 2,
            "hidden": 64,
            "heads": 4,
            "seq_len": 64,
            "vocab": 256,
            "ffn_hidden": 128,
            "activation": "swiglu",
            "experts": 8,
            "top_k": 2,
            "moe_ffn_hidden": 32,
            **(model or {}),
        },
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 4, **(parallel or {})},
        "batch": {"global": 8 * micro * 2, "micro": micro},
        "cluster": {"gpu": "H100", "gpus_per_node": 8, "nodes": nodes},
        "precision": {"dtype": "bf16"},
    }
