"""Small helpers for the Kineto importer tests: expected facts from the standard library."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.conftest import SAMPLES

DLRM = SAMPLES / "dlrm_kineto"
NCCL_DATA = SAMPLES / "hta_nccl" / "nccl_data.json.gz"

#: The 24 Kineto files of ../shared/data (research/realdata.md section 3).
SHARED_KINETO = (
    "deepseek-profile-data/train.json.gz",
    "hta-tests/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta-tests/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "hta-tests/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta-tests/df_index_resolver/df_index_resolver.json.gz",
    "hta-tests/nccl_parser_config/nccl_data.json.gz",
    "hta-tests/negative_queue_length_values_check/rank0.json.gz",
    "hta-tests/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta-tests/trace_diff/control/control.json.gz",
    "hta-tests/trace_diff/test/test.json.gz",
    "hta-tests/trace_filter/sampled_rank-0.json.gz",
    "hta-tests/trace_filter/sampled_rank-1.json.gz",
    "kineto-tb-plugin-samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    *(
        f"param-et-replay/dlrm_kineto/{name}"
        for name in (
            "worker0_step_12.1694128201545.pt.trace.json.gz",
            "worker1_step_12.1694128201556.pt.trace.json.gz",
            "worker2_step_12.1694128201554.pt.trace.json.gz",
            "worker3_step_12.1694128201557.pt.trace.json.gz",
            "worker4_step_12.1694128201547.pt.trace.json.gz",
            "worker5_step_12.1694128201549.pt.trace.json.gz",
            "worker6_step_12.1694128201553.pt.trace.json.gz",
            "worker7_step_12.1694128201553.pt.trace.json.gz",
        )
    ),
    "tracelens/b200/eager_trace.json.gz",
    "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300/resnet_act_checkpoint.json.gz",
)


def load(path: Path) -> dict[str, Any]:
    """The file as the standard library reads it, floats kept as exact ``Decimal``."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    doc: dict[str, Any] = json.loads(data, parse_float=Decimal)
    return doc


def ns(us: int | Decimal) -> int:
    """Exact ns of a µs value read with ``parse_float=Decimal``."""
    return int((Decimal(us) * 1000).to_integral_value())


def write_trace(path: Path, events: list[dict[str, Any]], **top: Any) -> Path:
    """A Kineto-style object-form file (gzip when the name ends in .gz)."""
    text = json.dumps({**top, "traceEvents": events}).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path
