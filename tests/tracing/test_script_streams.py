"""The streams and waits a traced script records: FSDP2's all-gather copy-in, all-gather and
reduce-scatter streams with their collectives on the data-parallel group's stream, and DDP's
bucket all-reduces waited for only at the end of the backward pass."""

from __future__ import annotations

import numpy as np
import pytest

from echo_view.model.graph import OpClass, OpTable, TracedGraph
from tests.conftest import SAMPLES, TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

from echo_view.tracing.script import ScriptSpec, trace_script
from echo_view.tracing.streams import WAIT_NAME

SCRIPTS = SAMPLES / "scripts"
TINY = {"layers": 2, "hidden": 256, "heads": 4, "vocab": 512, "seq_len": 128, "micro": 1}


def _rows(graph: TracedGraph) -> tuple[OpTable, ...]:
    role = graph.roles[0]
    return role.forward[0], role.backward[0], role.optimizer


def _step(graph: TracedGraph) -> dict[str, np.ndarray]:
    """Step-wide columns (forward, backward, optimizer rows), names as text."""
    tables = _rows(graph)
    out = {c: np.concatenate([getattr(t, c) for t in tables]) for c in ("stream", "wait")}
    out["op_class"] = np.concatenate([t.op_class for t in tables])
    out["coll_kind"] = np.concatenate([t.coll_kind for t in tables])
    out["name"] = np.array([graph.strings[int(n)] for t in tables for n in t.name])
    return out


def _waits_for(s: dict[str, np.ndarray], row: int) -> int:
    """The row a wait chain starting at ``row`` ends on (a kernel or collective)."""
    while s["wait"][row] >= 0:
        row = int(s["wait"][row])
    return row


@pytest.fixture(scope="module")
def fsdp() -> TracedGraph:
    spec = ScriptSpec(SCRIPTS / "llama3_fsdp.py")
    return trace_script(spec, 2, required={**TINY, "kv_heads": 2, "ffn_hidden": 512}).graph


@pytest.mark.slow
def test_fsdp2_collectives_run_on_the_group_stream_issued_from_their_own_streams(
    fsdp: TracedGraph,
) -> None:
    s = _step(fsdp)
    colls = np.flatnonzero(s["op_class"] == OpClass.COLLECTIVE)
    # Root + 2 blocks gathered in forward, 2 blocks again in backward; 3 reduce-scatters.
    names = list(s["name"][colls])
    assert names.count("c10d::_allgather_base_") == 5
    assert names.count("c10d::_reduce_scatter_base_") == 3
    # One process group, one communication stream, not the compute stream.
    (comm,) = set(s["stream"][colls].tolist())
    assert comm != 0
    # Each collective waits for the stream that issued it: all-gathers for the all-gather
    # stream, which waited for the copy-in stream (fsdp::all_gather_copy_in); reduce-scatters
    # for the reduce-scatter stream, which waited for the compute stream (the gradients).
    issuing: dict[str, set[int]] = {}
    for c in colls.tolist():
        before = c - 1
        assert s["name"][before] == WAIT_NAME and s["stream"][before] == comm
        issuer = int(s["stream"][int(s["wait"][before])])
        issuing.setdefault(str(s["name"][c]), set()).add(issuer)
        source = int(s["stream"][_waits_for(s, before)])
        if s["name"][c] == "c10d::_allgather_base_":
            assert s["name"][_waits_for(s, before)] == "fsdp::all_gather_copy_in"
        else:
            assert source == 0
    (ag_stream,) = issuing["c10d::_allgather_base_"]
    (rs_stream,) = issuing["c10d::_reduce_scatter_base_"]
    assert len({0, comm, ag_stream, rs_stream}) == 4
    copy_in = np.flatnonzero(s["name"] == "fsdp::all_gather_copy_in")
    assert len(set(s["stream"][copy_in].tolist()) - {0, comm, ag_stream, rs_stream}) == 1


@pytest.mark.slow
def test_fsdp2_compute_waits_for_each_gather_and_for_reduce_scatters_at_the_end(
    fsdp: TracedGraph,
) -> None:
    s = _step(fsdp)
    fwd, bwd, _ = _rows(fsdp)
    compute_waits = np.flatnonzero((s["stream"] == 0) & (s["wait"] >= 0))
    ends = {str(s["name"][_waits_for(s, int(w))]) for w in compute_waits}
    # The compute stream waits for collectives only (never for a copy-in directly).
    assert ends <= {"c10d::_allgather_base_", "c10d::_reduce_scatter_base_"}
    gathers = np.flatnonzero(s["name"] == "c10d::_allgather_base_")
    waited = {_waits_for(s, int(w)) for w in compute_waits}
    assert set(gathers.tolist()) <= waited  # every all-gather before its unit computes
    # Backward: the first reduce-scatter is not waited for before the next block's
    # gradients are computed (it overlaps them); the last rows of backward are the compute
    # stream's waits for the reduce-scatters (FSDP2's finalize_backward).
    scatters = np.flatnonzero(s["name"] == "c10d::_reduce_scatter_base_").tolist()
    first_wait = min(w for w in compute_waits if _waits_for(s, int(w)) == scatters[0])
    gemms_between = np.flatnonzero(s["name"][scatters[0] : first_wait] == "aten::mm")
    assert len(gemms_between) > 0
    last = len(fwd) + len(bwd) - 1
    assert s["stream"][last] == 0 and _waits_for(s, last) == scatters[-1]


@pytest.mark.slow
def test_ddp_bucket_all_reduces_overlap_backward_until_the_gradients_are_read() -> None:
    spec = ScriptSpec(SCRIPTS / "gpt_ddp.py")
    graph = trace_script(spec, 2, required={**TINY, "ffn_hidden": 1024}).graph
    s = _step(graph)
    fwd, bwd, opt = _rows(graph)
    reduces = np.flatnonzero(s["name"] == "c10d::allreduce_").tolist()
    # The steady-state buckets (a 1 MiB first bucket, then the rest), not the first
    # iteration's single bucket; all of them in backward, on one stream.
    assert len(reduces) == 2
    assert all(len(fwd) <= r < len(fwd) + len(bwd) for r in reduces)
    (comm,) = set(s["stream"][reduces].tolist())
    assert comm != 0
    # The gradients are views of the buckets (gradient_as_bucket_view): the compute stream
    # waits for each bucket's all-reduce after the backward pass and before the gradient
    # clipping reads the gradients, not at the end of the phase (after the clipping).
    first_read = int(np.flatnonzero(s["name"] == "aten::linalg_vector_norm")[0])
    compute_waits = np.flatnonzero((s["stream"] == 0) & (s["wait"] >= 0)).tolist()
    assert {_waits_for(s, w) for w in compute_waits} == set(reduces)
    assert all(reduces[-1] < w < first_read for w in compute_waits)
    # No division pass over the buckets, no copy of a bucket back into the gradients (they are
    # its views), and no optimizer state created (first step only).
    names = [graph.strings[int(n)] for n in opt.name]
    assert not {"aten::zeros_like", "aten::zeros"} & set(names)
    assert "aten::div_" not in {graph.strings[int(n)] for n in bwd.name}
    assert not any(s["name"][reduces[-1] : first_read] == "aten::copy_")


@pytest.mark.slow
def test_each_bucket_is_copied_back_after_its_all_reduce() -> None:
    """Without bucket views DDP copies each reduced bucket back into the gradients, bucket by
    bucket, each after waiting for its all-reduce (``Reducer::finalize_backward``)."""
    spec = ScriptSpec(SCRIPTS / "gpt_ddp.py")
    graph = trace_script(spec, 2, required={**TINY, "ffn_hidden": 1024, "bucket_view": False}).graph
    s = _step(graph)
    reduces = np.flatnonzero(s["name"] == "c10d::allreduce_").tolist()
    waits = {
        _waits_for(s, int(w)): int(w)
        for w in np.flatnonzero((s["stream"] == 0) & (s["wait"] >= 0)).tolist()
    }
    assert set(waits) == set(reduces)
    first_read = int(np.flatnonzero(s["name"] == "aten::linalg_vector_norm")[0])
    back = [
        c
        for c in np.flatnonzero(s["name"] == "aten::copy_").tolist()
        if reduces[-1] < c < first_read
    ]
    # Copies back into the gradients follow the first bucket's wait, and the second bucket's
    # wait comes between them (after the first bucket's copies, before its own).
    assert back and min(back) > waits[reduces[0]]
    assert min(back) < waits[reduces[1]] < max(back)
