"""The optimizer step's per-tensor host loops: Megatron's zero count, Megatron-LM of 2019's
gradient checks and FP16_Optimizer copies, over the parameter tensors the tracer counted."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from echo_view.model.graph import Role, TracedGraph
from echo_view.model.kinds import LaneKind
from echo_view.model.strings import StringTable
from echo_view.sim.host_loops import param_tensors
from tests.sim.op_tables import op_table
from tests.sim.test_host import SMALL, C, _sim


def test_per_tensor_gradient_checks_issue_five_launches_a_tensor_then_wait() -> None:
    # Megatron-LM of 2019: per gradient tensor float(x.float().sum()) (3 launches) and, when
    # clipping, p.grad.data.norm(2).item() (2), each read on the host. Host-bound, as above:
    # In fp16, as Megatron-LM of 2019 ran (its param copies are one kernel: no loop of them).
    kf, kb, ko, g = 40, 80, 3, 25
    base = (kf + kb) * C + SMALL + ko * C + SMALL
    assert _sim((kf, kb, ko), 0.0, grads=g, dtype="fp16").step_ns == base  # fused: one read
    checks = _sim((kf, kb, ko), 0.0, {"grad_checks": "per_tensor"}, grads=g, dtype="fp16")
    assert checks.step_ns == base + g * 5 * C
    # Without clipping only the overflow checks: their launches start right after the
    # backward's (no sync before them), and the last read waits for nothing the GPU still has.
    no_clip = _sim(
        (kf, kb, ko), 0.0, {"grad_checks": "per_tensor", "clip_grad": 0.0}, grads=g, dtype="fp16"
    )
    assert no_clip.step_ns == (kf + kb) * C + g * 3 * C + ko * C + SMALL
    wl = checks.composed.workload
    names = [wl.strings[int(n)] for n in wl.ops.name]
    assert f"per-tensor gradient checks ({g * 5} launches)" in names


def test_per_tensor_launches_count_the_tracers_parameter_tensors() -> None:
    # A graph that records its parameter tensors (30 here) launches per tensor for each of
    # them; one traced before it did counts the backward rows completing gradients (25).
    kf, kb, ko, g = 40, 80, 3, 25
    base = (kf + kb) * C + SMALL + ko * C + SMALL
    checks = {"grad_checks": "per_tensor"}
    counted = _sim((kf, kb, ko), 0.0, checks, grads=g, tensors=30, dtype="fp16")
    assert counted.step_ns == base + 30 * 5 * C
    assert _sim((kf, kb, ko), 0.0, checks, grads=g, dtype="fp16").step_ns == base + g * 5 * C


def test_bf16_param_copies_launch_one_a_tensor_after_the_optimizer() -> None:
    # Megatron-Core with bf16 copies the updated fp32 params into the bf16 ones with one
    # copy_ a tensor (no bf16 multi-tensor copy): the traced copy row is one of them, the
    # other T - 1 launch after the optimizer's issues and end the step on the host (the
    # optimizer's last kernel, SMALL, ends before them). Host-bound, T = 30 tensors:
    kf, kb, ko, t = 40, 80, 3, 30
    fp16 = _sim((kf, kb, ko), 0.0, tensors=t, dtype="fp16")
    assert fp16.step_ns == (kf + kb) * C + SMALL + ko * C + SMALL
    bf16 = _sim((kf, kb, ko), 0.0, tensors=t)
    assert bf16.step_ns == (kf + kb) * C + SMALL + (ko + t - 1) * C
    wl = bf16.composed.workload
    names = [wl.strings[int(n)] for n in wl.ops.name]
    assert f"bf16 param copies ({t - 1} launches)" in names


def test_fp16_optimizer_copies_launch_five_a_tensor_where_it_runs_them() -> None:
    # Megatron-LM of 2019's FP16_Optimizer, per parameter tensor: zero_grad's two zero_()
    # opening the backward, the fp16 -> fp32 gradient copy and the 1 / loss-scale multiply
    # after the gradient-norm read, the fp32 -> fp16 param copy after the optimizer. None of
    # them waits for the GPU. Host-bound (every kernel shorter than an issue), T = 30 tensors:
    kf, kb, ko, t = 40, 80, 3, 30
    sim = _sim((kf, kb, ko), 0.0, {"master_copies": "per_tensor"}, grads=25, tensors=t)
    # forward, zero_grad, backward; the norm's .item() waits for the last backward kernel;
    # the gradient copies, the optimizer's issues, then the param copies end the step on the
    # host (the optimizer's last kernel, SMALL, ends before them).
    assert sim.step_ns == (kf + 2 * t + kb) * C + SMALL + (2 * t + ko + t) * C
    wl = sim.composed.workload
    host = [i for i, lane in enumerate(wl.lanes) if lane.kind == LaneKind.CPU_THREAD]
    names = [wl.strings[int(n)] for n in wl.ops.name[wl.ops.lane == host[0]]]
    assert [n for n in names if "launches" in n] == [
        "zero_grad (60 launches)",
        "master grads (60 launches)",
        "master params (30 launches)",
    ]
    # Without clipping nothing waits: the copies' launches add to the issues.
    no_clip = {"master_copies": "per_tensor", "clip_grad": 0.0}
    assert _sim((kf, kb, ko), 0.0, no_clip, tensors=t).step_ns == (kf + kb + ko + 5 * t) * C


def test_a_roles_tensors_come_from_the_graph_else_from_its_gradient_rows() -> None:
    strings = StringTable()
    bwd = op_table(strings, [("w", 0, 0.0, 0)] * 3)
    bwd = replace(bwd, grad_bytes=np.array([8, 0, 8], dtype=np.int64))
    fwd = op_table(strings, [])
    role = Role((2, 3), (fwd,), (bwd,), fwd, params=4)
    assert param_tensors(TracedGraph(strings, (role,)), 0) == 2  # rows completing gradients
    counted = TracedGraph(strings, (role,), meta={"param_tensors": {"2": 7}})
    assert param_tensors(counted, 0) == 7  # keyed by the role's first stage


def test_a_flattened_allreduce_waits_then_copies_each_gradient_back() -> None:
    # Megatron-LM of 2019's allreduce_params: after the all-reduce, torch.cuda.synchronize()
    # and one copy_ per gradient, before the gradient norm's read (clip_grad 1.0). One rank
    # (no collective), host-bound, T = 30 tensors:
    kf, kb, ko, t = 40, 80, 3, 30
    sim = _sim((kf, kb, ko), 0.0, {"grad_allreduce": "flatten"}, tensors=t)
    # The sync after the backward waits for its last kernel; then the copies' launches (their
    # GPU work is the optimizer table's ddp_unflatten row, absent from this hand-made one),
    # the norm's sync, which finds the GPU idle, and the optimizer.
    assert sim.step_ns == (kf + kb) * C + SMALL + t * C + ko * C + SMALL
    wl = sim.composed.workload
    host = [i for i, lane in enumerate(wl.lanes) if lane.kind == LaneKind.CPU_THREAD]
    names = [wl.strings[int(n)] for n in wl.ops.name[wl.ops.lane == host[0]]]
    i = names.index("ddp unflatten (30 launches)")
    assert names[i - 1] == names[i + 1] == "cudaDeviceSynchronize"


def test_the_params_norm_launches_after_the_step_then_waits() -> None:
    # Megatron-LM's --log-params-norm after each step: 25 launches (the norm buckets, their
    # all-reduces and sums, the copy to the host), then .item() waits for the GPU. In fp16
    # (no per-tensor param copies), host-bound: the optimizer's last kernel (SMALL) ends
    # before the norm's launches do, and the read then waits for nothing.
    kf, kb, ko = 40, 80, 3
    plain = _sim((kf, kb, ko), 0.0, dtype="fp16")
    assert plain.step_ns == (kf + kb) * C + SMALL + ko * C + SMALL
    norm = _sim((kf, kb, ko), 0.0, {"log_params_norm": True}, dtype="fp16")
    assert norm.step_ns == (kf + kb) * C + SMALL + (ko + 25) * C
    wl = norm.composed.workload
    names = [wl.strings[int(n)] for n in wl.ops.name]
    assert "params norm (25 launches)" in names
