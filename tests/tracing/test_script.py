"""Tracing users' training scripts: the samples' FLOPs and collectives against their analytic
values, the GPT sample against the built-in GPT, and how groups map to parallel axes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from echo_view.loading import trace_config
from echo_view.model.aten_ops import attention_flops
from echo_view.model.config_parse import parse_workload_config
from echo_view.model.graph import AXES, OpClass, OpTable, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.sim.layout import Layout
from echo_view.sim.runs import predict_workload
from tests.conftest import SAMPLES, TORCH_MISSING

pytest.importorskip("torch", reason=TORCH_MISSING)

from echo_view.tracing.script import ScriptSpec, axis_of, trace_script

SCRIPTS = SAMPLES / "scripts"
#: A small Llama-3-shaped model: 2 layers, GQA 8 heads / 2 KV heads, SwiGLU.
LLAMA = {
    "layers": 2,
    "hidden": 1024,
    "heads": 8,
    "kv_heads": 2,
    "ffn_hidden": 2816,
    "vocab": 4096,
    "seq_len": 512,
    "micro": 2,
}
WORLD = 8


def _collectives(table: OpTable) -> Counter[tuple[str, int, str]]:
    return Counter(
        (table.coll(i).label, int(table.coll_bytes[i]), AXES[int(table.axis[i])])
        for i in table.collective_rows()
    )


def _matrix_flops(graph: TracedGraph) -> float:
    role = graph.roles[0]
    total = 0.0
    for t in (role.forward[0], role.backward[0], role.optimizer):
        mat = np.isin(t.op_class, [OpClass.GEMM, OpClass.ATTENTION])
        total += float(t.flops[mat].sum())
    return total


def _all_flops(graph: TracedGraph) -> float:
    role = graph.roles[0]
    return sum(float(t.flops.sum()) for t in (role.forward[0], role.backward[0]))


@pytest.fixture(scope="module")
def llama() -> TracedGraph:
    spec = ScriptSpec(SCRIPTS / "llama3_fsdp.py")
    return trace_script(spec, WORLD, required=LLAMA).graph


def _analytic_flops(m: dict[str, int], tp: int = 1) -> float:
    """6 N T plus causal attention for one rank: the blocks' matrices and heads split over
    ``tp`` ranks, the output layer whole (the sample does not shard it)."""
    head_dim = m["hidden"] // m["heads"]
    per_layer = (
        2 * m["hidden"] * m["hidden"]  # wq, wo
        + 2 * m["hidden"] * m["kv_heads"] * head_dim  # wk, wv
        + 3 * m["hidden"] * m["ffn_hidden"]  # w1, w2, w3
    )
    n = m["layers"] * per_layer // tp + m["hidden"] * m["vocab"]
    s = m["seq_len"]
    attn = m["layers"] * sum(
        attention_flops(m["micro"], m["heads"] // tp, s, s, head_dim, causal=True, backward=bwd)
        for bwd in (False, True)
    )
    return 6 * n * m["micro"] * s + attn


@pytest.mark.slow
def test_llama_flops_are_6nt_plus_attention(llama: TracedGraph) -> None:
    analytic = _analytic_flops(LLAMA)
    # Matrix products exactly; with every other op (one FLOP per output element) within 2%.
    assert _matrix_flops(llama) == pytest.approx(analytic, rel=1e-12)
    assert _all_flops(llama) == pytest.approx(analytic, rel=0.02)


@pytest.mark.slow
def test_llama_fsdp_collectives_are_the_sharded_sizes(llama: TracedGraph) -> None:
    """FSDP2 with bf16 parameters and fp32 reduction: each block (and the root: embedding,
    final norm, output layer) all-gathers its parameters in bf16 before its forward, each
    block again before its backward (resharded after forward; the root is not), and each
    reduce-scatters its gradients in fp32; all over the data-parallel group (no padding:
    every dim 0 divides by 8)."""
    m = LLAMA
    head_dim = m["hidden"] // m["heads"]
    block = (
        2 * m["hidden"] * m["hidden"]
        + 2 * m["hidden"] * m["kv_heads"] * head_dim
        + 3 * m["hidden"] * m["ffn_hidden"]
        + 2 * m["hidden"]  # two RMSNorm weights
    )
    root = 2 * m["vocab"] * m["hidden"] + m["hidden"]
    layers = m["layers"]
    role = llama.roles[0]
    assert _collectives(role.forward[0]) == Counter(
        {("all_gather", 2 * root, "dp"): 1, ("all_gather", 2 * block, "dp"): layers}
    )
    assert _collectives(role.backward[0]) == Counter(
        {
            ("all_gather", 2 * block, "dp"): layers,
            ("reduce_scatter", 4 * block, "dp"): layers,
            ("reduce_scatter", 4 * root, "dp"): 1,
        }
    )
    assert _collectives(role.optimizer) == Counter()
    # This rank's shard of the parameters, which the optimizer steps.
    assert role.params == (layers * block + root) // WORLD
    assert llama.meta["explicit_comm"] is True
    assert llama.meta["traced_ranks"] == [0, WORLD - 1]


@pytest.mark.slow
def test_llama_tensor_parallel_groups_map_to_tp_and_dp() -> None:
    spec = ScriptSpec(SCRIPTS / "llama3_fsdp.py")
    small = {**LLAMA, "layers": 1, "tp": 2}
    graph = trace_script(spec, WORLD, required=small).graph
    assert graph.meta["layout"] == {"tp": 2, "dp": 4, "cp": 1, "pp": 1}
    fwd = _collectives(graph.roles[0].forward[0])
    # Row-parallel outputs (attention wo, feed-forward w2) all-reduce the bf16 activations.
    act = small["micro"] * small["seq_len"] * small["hidden"] * 2
    assert fwd[("all_reduce", act, "tp")] == 2
    assert {axis for _, _, axis in fwd} == {"tp", "dp"}
    # Each rank multiplies its shards only (DTensor's global-shape shape propagation is not
    # recorded), and its optimizer steps its shard of every parameter.
    assert _matrix_flops(graph) == pytest.approx(_analytic_flops(small, tp=2), rel=1e-12)
    adam = graph.roles[0].optimizer
    names = [graph.strings[int(i)] for i in adam.name]
    fused = int(adam.bytes[names.index("aten::_fused_adamw_")])
    # fp32 parameter, gradient and two moments of each local element read, the parameter and
    # moments written back (28 bytes), one step counter per tensor read (12 tensors).
    assert fused == 28 * graph.roles[0].params + 4 * 12


@pytest.fixture(scope="module")
def gpt_pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The GPT of ``bench/script_vs_builtin.py`` (4 layers, hidden 2048, sequence 2048, data
    parallel over 8 H100) built in, with the keys of the script's PyTorch-native program
    (autocast; PyTorch's DDP, with its 25 MiB buckets; its clipping and cross entropy), and as
    the DDP script: each config's graph and simulated step."""
    base: dict[str, Any] = {
        "model": {"layers": 4, "hidden": 2048, "heads": 16, "seq_len": 2048, "vocab": 51200},
        "parallel": {"tp": 1, "pp": 1, "dp": 8, "overlap_grad_reduce": True},
        "batch": {"global": 8, "micro": 1},
        "cluster": {"gpu": "H100-SXM5-80GB", "gpus_per_node": 8, "nodes": 1},
        "precision": {"dtype": "bf16"},
    }
    builtin = {
        **base,
        "model": {**base["model"], "kind": "gpt", "cross_entropy": "torch"},
        "parallel": {**base["parallel"], "ddp": "torch"},
        "precision": {"dtype": "bf16", "autocast": True},
        "training": {"clip_grad_norm": "torch"},
    }
    script_model = {**base["model"], "script": str(SCRIPTS / "gpt_ddp.py")}
    where = str(tmp_path_factory.mktemp("gpt") / "c.toml")
    out: dict[str, Any] = {}
    for name, data in (("built-in", builtin), ("script", {**base, "model": script_model})):
        cfg = parse_workload_config(data, where)
        graph = trace_config(cfg)
        out[name] = (graph, predict_workload(cfg, graph, {}))
    return out


@pytest.mark.slow
def test_builtin_gpt_and_the_gpt_script_agree(gpt_pair: dict[str, Any]) -> None:
    """The same GPT built in and as a DDP script: the same parameters and matrix FLOPs, the
    script's DDP buckets all-reduce exactly the gradient bytes the composer adds for the
    built-in model (fp32 gradients of every parameter), and the simulator times the same
    matrix products, attention and gradient traffic, with the same communication exposed."""
    (builtin, b_run), (script, s_run) = gpt_pair["built-in"], gpt_pair["script"]
    assert script.roles[0].params == builtin.roles[0].params
    assert _matrix_flops(script) == pytest.approx(_matrix_flops(builtin), rel=1e-4)
    reduced = sum(int(t.coll_bytes.sum()) for t in script.roles[0].backward)
    assert reduced == builtin.roles[0].params * 4
    bwd = script.roles[0].backward[0]
    assert {bwd.coll(i).label for i in bwd.collective_rows()} == {"all_reduce"}
    b, s = b_run.sim.class_ns(0), s_run.sim.class_ns(0)
    assert s["gemm"] == pytest.approx(b["gemm"], rel=1e-3)
    assert s["attention"] == pytest.approx(b["attention"], rel=1e-3)
    # DDP's 1 MiB first bucket and its cuts at tensor boundaries: the same bytes in slightly
    # different all-reduces.
    assert s["collective"] == pytest.approx(b["collective"], rel=0.02)
    # Both expose the all-reduce of the tied embedding's gradient, the last one complete.
    assert s["exposed"] == pytest.approx(b["exposed"], abs=0.02 * b_run.sim.step_ns)


@pytest.mark.slow
def test_builtin_gpt_and_the_gpt_script_step_times_agree(gpt_pair: dict[str, Any]) -> None:
    (_, b_run), (_, s_run) = gpt_pair["built-in"], gpt_pair["script"]
    assert s_run.sim.step_ns == pytest.approx(b_run.sim.step_ns, rel=0.02)


@pytest.mark.parametrize(
    ("ranks", "rank", "axis"),
    [
        ((0, 1), 0, "tp"),
        ((0, 2, 4, 6), 0, "dp"),
        ((1, 3, 5, 7), 7, "dp"),
        ((6, 7), 7, "tp"),
    ],
)
def test_axis_of_matches_the_layout_group(ranks: tuple[int, ...], rank: int, axis: str) -> None:
    assert axis_of(ranks, rank, Layout(tp=2, pp=1, dp=4)) == axis


def test_axis_of_refuses_a_group_of_no_axis() -> None:
    with pytest.raises(ValueError):
        axis_of((0, 3), 0, Layout(tp=2, pp=1, dp=4))


def test_script_spec_parses_file_and_function(tmp_path: Path) -> None:
    assert ScriptSpec.parse("a.py") == ScriptSpec(Path("a.py"), "train_step")
    assert ScriptSpec.parse("a.py:step", tmp_path) == ScriptSpec(tmp_path / "a.py", "step")
    # A ":" in a file name is no function ("not a Python script: 'we'"); the last ":" is.
    assert ScriptSpec.parse("we:ird.py") == ScriptSpec(Path("we:ird.py"), "train_step")
    assert ScriptSpec.parse("c:/w/a.py:step") == ScriptSpec(Path("c:/w/a.py"), "step")


def test_compose_adds_no_data_parallel_collective_to_a_script_graph() -> None:
    """The shipped 8B FSDP graph holds its all-gathers and reduce-scatters; simulating its
    config composes only the graph's passes and optimizer, no gradient reduction or parameter
    gather of the composer's own (which a Megatron-style config with dp = 8 gets)."""
    from echo_view.loading import load_workload
    from echo_view.sim.runs import simulate_workload

    cfg, graph, origin, _ = load_workload(SCRIPTS / "llama3_8b_fsdp_8xh100.toml")
    assert origin == "beside" and graph.meta["explicit_comm"] is True
    sim = simulate_workload(cfg, graph, ranks="all")
    wl = sim.composed.workload
    names = {wl.strings[int(n)] for n in wl.ops.name}
    assert not any("(grads" in n or "(params" in n for n in names)
    # Every rank's collectives are the graph's own: 2 x 32 + 1 all-gathers and 33
    # reduce-scatters per rank, over the 8 data-parallel ranks.
    kinds = Counter(int(k) for k in wl.collectives.kind)
    assert sum(kinds.values()) == 32 + 1 + 32 + 33
    assert {len(g.ranks) for g in wl.groups} == {WORLD}


CLIPPED_STEP = """
import torch


def train_step() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Linear(32, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 64)).sum().backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
"""


def test_clip_grad_norm_is_traced_on_its_foreach_path(tmp_path: Path) -> None:
    """``clip_grad_norm_`` runs its foreach kernels on a GPU (and a CPU): one norm over the
    four gradients (read once, four fp32 norms written) and one in-place multiply of them all
    (read and written, the coefficient read), not a norm and a multiply per tensor."""
    script = tmp_path / "clipped.py"
    script.write_text(CLIPPED_STEP)
    graph = trace_script(ScriptSpec(script), 1).graph
    table = graph.roles[0].backward[0]
    names = [graph.strings[int(i)] for i in table.name]
    grads = 4 * (64 * 32 + 32 + 32 * 16 + 16)
    assert names.count("aten::_foreach_norm") == 1 and "aten::linalg_vector_norm" in names
    assert names.count("aten::_foreach_mul_") == 1 and "aten::mul_" not in names
    assert int(table.bytes[names.index("aten::_foreach_norm")]) == grads + 4 * 4
    assert int(table.bytes[names.index("aten::_foreach_mul_")]) == 2 * grads + 4


DROPOUT_STEP = """
import torch


def train_step() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Dropout(0.1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    y = model(torch.randn(8, 64))
    dropout = torch.nn.functional.dropout
    (dropout(y, p=0.2) + dropout(y, p=1.0)).sum().backward()
    optimizer.step()
"""


def test_dropout_is_traced_as_the_gpus_fused_kernel(tmp_path: Path) -> None:
    """``F.dropout`` and ``nn.Dropout`` in training run one ``native_dropout`` kernel on a GPU
    (the output and a one-byte mask: 8 x 32 fp32 elements, 4 + 4 + 1 bytes each) and
    ``native_dropout_backward`` (the gradient and the mask read, the gradient written), as in
    a GPU's trace; at p = 1 PyTorch zeroes instead, on a GPU as on a CPU."""
    script = tmp_path / "dropped.py"
    script.write_text(DROPOUT_STEP)
    graph = trace_script(ScriptSpec(script), 1).graph
    role = graph.roles[0]
    fwd, bwd = role.forward[0], role.backward[0]
    f_names = [graph.strings[int(i)] for i in fwd.name]
    b_names = [graph.strings[int(i)] for i in bwd.name]
    assert "aten::bernoulli_" not in f_names
    drops = [int(fwd.bytes[i]) for i, n in enumerate(f_names) if n == "aten::native_dropout"]
    assert drops == [9 * 8 * 32] * 2
    backs = [
        int(bwd.bytes[i]) for i, n in enumerate(b_names) if n == "aten::native_dropout_backward"
    ]
    assert backs == [9 * 8 * 32] * 2


def test_layout_inference_on_shared_and_on_equal_groups() -> None:
    """The recorder shares one tuple per process group among its collectives (so a program
    pickles a group once: at --world 1,000,000 the data-parallel group is a million ranks);
    inference then visits each distinct group once. Equal groups that are not shared give the
    same layout."""
    from typing import cast

    from echo_view.model import CollectiveKind
    from echo_view.model.graph import OpTable
    from echo_view.tracing.script import infer_layout
    from echo_view.tracing.script_run import RankProgram

    class Table:
        def __init__(self, kinds: list[CollectiveKind]) -> None:
            self.kinds = kinds

        def coll(self, row: int) -> CollectiveKind:
            return self.kinds[row]

    ar, a2a = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_TO_ALL
    tp, dp, ep = tuple(range(4)), tuple(range(0, 32, 4)), (0, 4)

    def program(copy: bool) -> RankProgram:
        def g(ranks: tuple[int, ...]) -> tuple[int, ...]:
            return tuple(list(ranks)) if copy else ranks

        rows = [(0, g(tp)), (1, g(dp)), (2, g(ep)), (3, g(tp)), (4, g(dp)), (5, g(ep))]
        table = cast(OpTable, Table([ar, ar, a2a, ar, ar, a2a]))
        return RankProgram(0, {"forward": table}, {"forward": rows}, 0, 2)

    shared, equal = infer_layout([program(False)], 32), infer_layout([program(True)], 32)
    assert shared == equal
    assert (shared.tp, shared.dp, shared.ep) == (4, 8, 2)


ADAMW_STEP = """
import torch


def train_step() -> None:
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(6)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4{extra})
    model(torch.randn(8, 64)).sum().backward()
    optimizer.step()
"""


def test_an_optimizer_takes_its_gpu_default_path(tmp_path: Path) -> None:
    """``AdamW(params)`` runs its foreach path on a GPU (``_default_to_fused_or_foreach``);
    on the fake CPU tensors it took the loop of ten kernels per parameter tensor (the 12
    tensors here: 120 ops), and read the step counters, which live on the host, as kernels
    (24 of them; 24 of the 33 with foreach=True)."""

    def optimizer_ops(extra: str) -> list[str]:
        script = tmp_path / f"adamw{len(extra)}.py"
        script.write_text(ADAMW_STEP.format(extra=extra))
        graph = trace_script(ScriptSpec(script), 1).graph
        return [graph.strings[int(i)] for i in graph.roles[0].optimizer.name]

    default = optimizer_ops("")
    assert default == optimizer_ops(", foreach=True")
    assert all(name.startswith("aten::_foreach_") for name in default) and len(default) < 15
    assert "aten::_local_scalar_dense" not in default
    fused = optimizer_ops(", fused=True")
    assert fused != default and len(fused) < 5


DDP_STEP = """
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train_step() -> None:
    torch.set_default_dtype({dtype})
    model = DDP(nn.Sequential(*{layers}){cap})
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model(torch.randn(64, 1024)).float().pow(2).mean().backward()
    opt.step()
"""


def test_ddp_buckets_are_those_it_rebuilds_after_the_first_step(tmp_path: Path) -> None:
    """From the second step DDP's buckets are filled in the order gradients become ready,
    from the last layer (measured on PyTorch 2.13 with two gloo processes: 6,297,600,
    6,297,600, 4,198,400 bytes for eight bf16 linears of 1,024 under a 5 MiB cap; 16,781,312
    then 16,793,600 for an fp32 1,024-4,096-1,024 MLP under the default 25 MiB, whose first
    bucket is capped at 1 MiB). The tracer assigned them in parameter order: the partial
    bucket came first (4,200,448)."""

    def buckets(dtype: str, layers: str, cap: str) -> list[int]:
        script = tmp_path / f"ddp{len(cap)}.py"
        script.write_text(DDP_STEP.format(dtype=dtype, layers=layers, cap=cap))
        table = trace_script(ScriptSpec(script), 2).graph.roles[0].backward[0]
        colls = table.op_class == OpClass.COLLECTIVE
        return [int(b) for b in table.coll_bytes[colls]]

    eight = "[nn.Linear(1024, 1024) for _ in range(8)]"
    assert buckets("torch.bfloat16", eight, ", bucket_cap_mb=5") == [6297600, 6297600, 4198400]
    mlp = "[nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)]"
    assert buckets("torch.float32", mlp, "") == [16781312, 16793600]


COLLECTIVE_STEP = """
import torch
import torch.distributed as dist
from torch import nn


def train_step() -> None:
    model = nn.Linear(64, 64, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 64)).sum().backward()
    {call}
    opt.step()
"""


def test_a_barrier_is_a_one_element_all_reduce(tmp_path: Path) -> None:
    # dist.barrier() was recorded as nothing; NCCL runs it as an all-reduce of one element
    # (ProcessGroupNCCL::barrier).
    script = tmp_path / "barrier.py"
    script.write_text(COLLECTIVE_STEP.format(call="dist.barrier()"))
    table = trace_script(ScriptSpec(script), 4).graph.roles[0].backward[0]
    colls = table.op_class == OpClass.COLLECTIVE
    assert table.coll_bytes[colls].tolist() == [4]
    assert table.coll_kind[colls].tolist() == [int(CollectiveKind.ALL_REDUCE)]


def test_an_uneven_all_to_all_is_refused(tmp_path: Path) -> None:
    # Split sizes were ignored: an exchange sending everything to rank 0 was timed as even.
    from echo_view.errors import InputError

    call = (
        "dist.all_to_all_single(torch.empty(64, 64), model.weight.grad, "
        "output_split_sizes=[64, 0, 0, 0], input_split_sizes=[64, 0, 0, 0])"
    )
    script = tmp_path / "a2a.py"
    script.write_text(COLLECTIVE_STEP.format(call=call))
    with pytest.raises(InputError, match="uneven split sizes"):
        trace_script(ScriptSpec(script), 4)
    even = call.replace("[64, 0, 0, 0]", "[16, 16, 16, 16]")
    script.write_text(COLLECTIVE_STEP.format(call=even))
    table = trace_script(ScriptSpec(script), 4).graph.roles[0].backward[0]
    assert table.coll_bytes[table.op_class == OpClass.COLLECTIVE].tolist() == [64 * 64 * 4]


def test_moving_a_model_to_the_device_it_is_on_is_accepted(tmp_path: Path) -> None:
    # model.to(device) with the CPU (torch.cuda.is_available() is false while tracing) was
    # refused: "Couldn't swap Linear.weight", fake parameters cannot be converted.
    script = tmp_path / "to_device.py"
    script.write_text(
        "import torch\nfrom torch import nn\n\n\ndef train_step() -> None:\n"
        "    device = 'cuda' if torch.cuda.is_available() else 'cpu'\n"
        "    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8)).to(device)\n"
        "    model = model.to(torch.float32).to(device=device, dtype=torch.float32)\n"
        "    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model(torch.randn(4, 64, device=device)).sum().backward()\n    opt.step()\n"
    )
    graph = trace_script(ScriptSpec(script), 1).graph
    names = [graph.strings[int(i)] for i in graph.roles[0].forward[0].name]
    assert names.count("aten::addmm") == 2
