"""``bench/deepseek_moe_layers.py``: DeepSeek's DeepSeek-V3 training profile cut into MoE layers
(the profile is in ``../shared`` only: it has no licence to ship in ``samples/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from echo_view.loading import read_job
from echo_view.model import EventKind, LaneKind, Trace, TraceBuilder
from tests.conftest import SAMPLES, bench_module, shared_path

DM = bench_module("deepseek_moe_layers")


@pytest.fixture(scope="module")
def profile() -> tuple[Trace, list[Any]]:
    trace = read_job([shared_path("data", "deepseek-profile-data", "train.json.gz")]).traces[0]
    return trace, DM.segment(trace)


def test_four_moe_layers_per_chunk_each_way(profile: tuple[Trace, list[Any]]) -> None:
    """SOURCE.md: one forward and one backward chunk of DualPipe, 4 MoE layers each."""
    _, passes = profile
    assert [(p.direction, p.layer) for p in passes] == [
        *(("fwd", i) for i in range(1, 5)),
        *(("bwd", i) for i in range(1, 5)),
    ]
    for p in passes:
        assert tuple(p.phases) == (DM.FWD if p.direction == "fwd" else DM.BWD)


def test_each_layer_has_one_dispatch_and_one_combine(profile: tuple[Trace, list[Any]]) -> None:
    trace, passes = profile
    for p in passes:
        (d,), (c,) = p.comm("dispatch"), p.comm("combine")
        notify = sorted(k.comm.operation for k in p.comm("notify"))
        if p.direction == "fwd":
            assert d in p.phases["dispatch(F)"] and c in p.phases["combine(F)"]
            assert notify == ["cached_notify", "notify_dispatch"]
        else:
            # combine's gradient is dispatched and dispatch's gradient combined.
            assert d in p.phases["combine(B)"] and c in p.phases["dispatch(B)"]
            assert notify == ["cached_notify", "cached_notify"]
        assert "dispatch<" in d.name and "combine<" in c.name
    # Every communication kernel of the trace belongs to a layer.
    found = {k.row for p in passes for op in ("dispatch", "combine", "notify") for k in p.comm(op)}
    assert found == set(trace.collectives.event.tolist()) and len(found) == 32


def test_gemm_counts_per_annotation(profile: tuple[Trace, list[Any]]) -> None:
    trace, passes = profile
    want = {"attn(F)": 6, "mlp(F)": 4, "mlp(B)": 4, "mlp(W)": 10, "attn(B)": 9, "attn(W)": 5}
    for p in passes:
        for phase, ks in p.phases.items():
            assert sum(k.family is not None for k in ks) == want.get(phase, 0), (p.label, phase)
        grouped = [r for r, _ in p.gemms if r.family == "grouped"]
        assert len(grouped) == 2 and all(r.dims[0] == 4 for r in grouped)  # 4 experts a rank
        assert len(p.gemms) == (10 if p.direction == "fwd" else 28)
    # Every GEMM kernel of the trace is in a layer.
    gemms = [k for k in DM.kernels(trace) if k.family is not None]
    assert len(gemms) == sum(len(p.gemms) for p in passes) == 152


def test_recovered_sm_budgets_and_measured_rows(profile: tuple[Trace, list[Any]]) -> None:
    trace, passes = profile
    assert DM.deepep_sms(passes) == 20  # DeepEP's grid: 20 SMs ...
    assert {k.ctas for p in passes for r, k in p.gemms if r.family != "bf16"} == {112}  # + 112
    act = DM.Activity.of(trace)
    for p in passes:
        row = DM.layer_row(p, act)
        assert 0 < row.gemm_predicted < row.gemm_measured  # the model is fast on every layer
        assert row.gemm_predicted < row.gemm_interference < row.gemm_predicted * DM.gemm_slowdown()
        assert 0 < row.comm_overlapped <= row.comm_busy


def test_deepep_bytes_are_counted_as_deepep_sends_them() -> None:
    """Dispatch: 4096 tokens of FP8 + scales, combine BF16, each sent once per destination
    node: 4 (the node limit; 5.29 expected without it) over DeepEP's EP64 RDMA bandwidth
    (51 / 50 GB/s) on 8 x 8 H800, not once per routed copy (8)."""
    assert DM.predict_deepep_ns("dispatch", 20) == pytest.approx(4096 * 4 * 7392 / 51e9 * 1e9)
    assert DM.predict_deepep_ns("combine", 20) == pytest.approx(4096 * 4 * 14336 / 50e9 * 1e9)


def test_unexpected_gemms_are_refused() -> None:
    k = DM.Kernel(0, "k", 0, 1, 112, None, "fp8")
    with pytest.raises(DM.SegmentationError, match=r"layer fwd 1 mlp\(F\): GEMM kernels"):
        DM.match_roles("mlp(F)", [k, k, k, k], "layer fwd 1")
    with pytest.raises(DM.SegmentationError, match=r"dispatch\(F\): GEMM kernels \['fp8'\]"):
        DM.match_roles("dispatch(F)", [k], "layer fwd 1")
    assert DM.match_roles("dispatch(F)", [], "layer fwd 1") == []


def test_a_cut_profile_is_refused() -> None:
    """A profile whose forward layer lacks its dispatch, combine and MLP steps."""
    b = TraceBuilder(0, source="cut")
    cpu = b.lane(LaneKind.CPU_THREAD, 1, 1)
    b.event(EventKind.USER_ANNOTATION, "attn(F)", 0, 1_000, cpu)
    with pytest.raises(DM.SegmentationError, match=r"layer fwd 1: steps \['attn\(F\)'\]"):
        DM.segment(b.build())


def test_other_traces_end_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert DM.main([str(tmp_path / "absent.json")]) == 2
    assert DM.main([str(SAMPLES / "hta_nccl" / "nccl_data.json.gz")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "no such file" in err[0] and "annotations" in err[1]


def test_docs_quote_todays_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/accuracy.md holds the script's tables as it prints them now."""
    assert DM.main([str(shared_path("data", "deepseek-profile-data", "train.json.gz"))]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    doc = (DM.ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 9 + 1 + 8 + 1 + 32
    assert [r for r in rows if r not in doc] == []
