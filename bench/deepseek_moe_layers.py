"""DeepSeek-V3's MoE layers in DeepSeek's published H800 training profile, measured against
echo-view's GEMM shape model and DeepEP model: the tables of docs/accuracy.md, "DeepSeek-V3 MoE
layers (EP64, H800)".

    python bench/deepseek_moe_layers.py [TRACE]

TRACE defaults to ``../shared/data/deepseek-profile-data/train.json.gz``
(deepseek-ai/profile-data ``train.json``: one DualPipe forward + backward chunk pair of
DeepSeek-V3 training on rank 0 of 64, 4 MoE layers per chunk, EP64, TP1, sequence 4096, H800,
balanced routing simulated). The trace is read with echo-view's Kineto importer.

**Segmentation.** The profile's CPU annotations name each step of DualPipe's overlapped
forward / backward pair: ``attn(F)``, ``dispatch(F)``, ``mlp(F)``, ``combine(F)`` for the
forward layer and ``combine(B)``, ``mlp(B)``, ``dispatch(B)``, ``mlp(W)``, ``attn(B)``,
``attn(W)`` for the backward one (``W``: weight gradients). A forward layer starts at each
``attn(F)``, a backward layer at each ``combine(B)``. Every kernel belongs to the annotation
whose span holds its launch (the autograd thread's launches included: the annotation on the
main thread waits for them). Communication is what :mod:`echo_view.model.comm_kernels` says
(DeepEP's ``dispatch``, ``combine`` and its count exchanges ``notify_dispatch`` /
``cached_notify``); GEMMs are the trace's GEMM kernels: DeepSeek's FP8 kernels
``dpsk::grouped_gemm::cuda::{fp8_ptp128c, m_grouped_fp8_ptp128c, fp8_dptp128c_acc}`` and the
router's BF16 cuBLAS ``sm90_xmma_gemm_bf16*``. Each annotation's GEMMs must be the expected
sequence of kernel families (:data:`ROLES`); anything else stops the script.

**Shapes.** The trace records no operator shapes (no ``Input Dims``), so every GEMM's shape
is DeepSeek-V3's published one (arXiv 2412.19437, section 4.2): hidden 7168; MLA with 128
heads of 128 (+64 RoPE) dims, query compression 1536, KV compression 512; 256 routed experts
and 1 shared, top-8, expert FFN 2048; 4,096 tokens per micro-batch per rank (TP1). Balanced
routing puts 4096 x 8 x 64 / 256 = 8,192 token rows on each of a rank's 4 experts. Roles follow
the execution order of the MLA / MoE layer; where the order of two GEMMs of an annotation is
not fixed by the data flow (MLA backward and weight gradients) the sums per annotation do not
depend on it.

**Predictions.** GEMMs: :func:`echo_view.sim.gemm_shape.gemm_times_ns` with the H800 preset's
constants (:func:`echo_view.sim.compute_presets.gemm_shape_params_for`: FP8 from DeepGEMM's
H800 GEMMs, BF16 from OpenXLA's H100 table), on the whole GPU (132 SMs). Measured GEMM time
of a set is the time at least one of its kernels runs (two weight-gradient GEMMs run
concurrently on two streams). Interference: the published Hopper model
(:func:`echo_view.sim.interference.default_model`, full-overlap slowdown 1.189) applied by the
rate rule (:func:`~echo_view.sim.interference.measured_rates.finish_times`) to each GEMM
started at its measured start through the GPU's measured DeepEP activity. Dispatch / combine:
:class:`echo_view.sim.comm.deepep.DeepEPModel` on 8 x 8 H800 with the SM budget the kernels
ran with (their grid), 4096 x 8 routed token copies per rank, FP8 + scales for dispatch
(7,168 + 56 x 4 B per token) and BF16 for combine (14,336 B), each token sent once per
destination node (at most 4: node-limited routing) and rank, as DeepEP sends and counts it.
Nothing is fitted on this trace; sensitivity rows are labelled as such.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.analysis.breakdown import COMM, COMPUTE, gpu_work  # noqa: E402
from echo_view.analysis.intervals import clip, measure, union  # noqa: E402
from echo_view.errors import EchoViewError  # noqa: E402
from echo_view.loading import read_job  # noqa: E402
from echo_view.model import EventKind, Trace, parse_comm_kernel_name  # noqa: E402
from echo_view.model.comm_kernels import CommKernelInfo  # noqa: E402
from echo_view.model.gpus import gpu_preset  # noqa: E402
from echo_view.sim.cluster import make_cluster  # noqa: E402
from echo_view.sim.comm.deepep import DeepEPModel, DeepEPParams  # noqa: E402
from echo_view.sim.comm.routing import routed_time_ns  # noqa: E402
from echo_view.sim.compute_presets import gemm_shape_params_for  # noqa: E402
from echo_view.sim.gemm_shape import gemm_times_ns  # noqa: E402
from echo_view.sim.interference import default_model  # noqa: E402
from echo_view.sim.interference.measured_rates import finish_times  # noqa: E402
from echo_view.sim.kernel_cost import peak_for  # noqa: E402

TRACE = ROOT.parent / "shared" / "data" / "deepseek-profile-data" / "train.json.gz"
GPU = "H800-SXM5-80GB"

# DeepSeek-V3 (arXiv 2412.19437, section 4.2) and the profile's layout (its README).
T = 4096  # tokens per micro-batch on a rank (sequence 4096, TP1)
H = 7168  # hidden
HEADS, D_NOPE, D_ROPE, D_V = 128, 128, 64, 128
Q_LORA, KV_LORA = 1536, 512
EXPERTS, TOPK, FFN = 256, 8, 2048
EP, NODES = 64, 8
#: At most 4 nodes per token (DeepSeek-V3's node-limited routing, M = 4).
NODE_LIMIT = 4
LOCAL = EXPERTS // EP
ROWS = T * TOPK * EP // EXPERTS  # token rows per expert under balanced routing
QD = HEADS * (D_NOPE + D_ROPE)  # q_b output
KVD = HEADS * (D_NOPE + D_V)  # kv_b output
#: Bytes per routed token: FP8 with one float scale per 128 channels (dispatch), BF16 (combine).
TOKEN_BYTES = {"dispatch": H + H // 128 * 4, "combine": 2 * H}

PHASE = re.compile(r"^(attn|mlp|dispatch|combine)\(([FBW])\)$")
#: GEMM kernel families of the profile, by a piece of their name.
FAMILIES = (
    ("m_grouped_fp8_ptp128c::GemmKernel", "grouped"),
    ("fp8_dptp128c_acc::GemmKernel", "wgrad"),
    ("fp8_ptp128c::GemmKernel", "fp8"),
    ("xmma_gemm_bf16", "bf16"),
)


@dataclass(frozen=True)
class Role:
    """One GEMM of a layer: what it computes, its kernel family, (batch, M, N, K), its group."""

    label: str
    family: str
    dims: tuple[int, int, int, int]
    group: str
    #: Whether its place among the annotation's GEMMs is fixed by the data flow.
    ordered: bool = True

    @property
    def dtype(self) -> str:
        return "bf16" if self.family == "bf16" else "fp8"


_FC1 = 2 * FFN  # gate and up projections, fused
#: The GEMMs of each annotation, in launch order (the others have none).
ROLES: dict[str, tuple[Role, ...]] = {
    "attn(F)": (
        Role("q_a", "fp8", (1, T, Q_LORA, H), "MLA"),
        Role("kv_a", "fp8", (1, T, KV_LORA + D_ROPE, H), "MLA"),
        Role("q_b", "fp8", (1, T, QD, Q_LORA), "MLA"),
        Role("kv_b", "fp8", (1, T, KVD, KV_LORA), "MLA"),
        Role("o", "fp8", (1, T, H, HEADS * D_V), "MLA"),
        Role("router gate", "bf16", (1, T, EXPERTS, H), "router"),
    ),
    "mlp(F)": (
        Role("shared fc1", "fp8", (1, T, _FC1, H), "shared expert"),
        Role("routed fc1", "grouped", (LOCAL, ROWS, _FC1, H), "routed experts"),
        Role("routed fc2", "grouped", (LOCAL, ROWS, H, FFN), "routed experts"),
        Role("shared fc2", "fp8", (1, T, H, FFN), "shared expert"),
    ),
    "mlp(B)": (
        Role("shared fc2 dgrad", "fp8", (1, T, FFN, H), "shared expert"),
        Role("routed fc2 dgrad", "grouped", (LOCAL, ROWS, FFN, H), "routed experts"),
        Role("routed fc1 dgrad", "grouped", (LOCAL, ROWS, H, _FC1), "routed experts"),
        Role("shared fc1 dgrad", "fp8", (1, T, H, _FC1), "shared expert"),
    ),
    "mlp(W)": (
        Role("shared fc2 wgrad", "wgrad", (1, H, FFN, T), "shared expert", False),
        *(Role("routed fc2 wgrad", "wgrad", (1, H, FFN, ROWS), "routed experts", False),) * LOCAL,
        *(Role("routed fc1 wgrad", "wgrad", (1, _FC1, H, ROWS), "routed experts", False),) * LOCAL,
        Role("shared fc1 wgrad", "wgrad", (1, _FC1, H, T), "shared expert", False),
    ),
    "attn(B)": (
        Role("router gate dgrad", "bf16", (1, T, H, EXPERTS), "router"),
        Role("router gate wgrad", "bf16", (1, EXPERTS, H, T), "router"),
        Role("o dgrad", "fp8", (1, T, HEADS * D_V, H), "MLA"),
        Role("q_b recompute", "fp8", (1, T, QD, Q_LORA), "MLA", False),
        Role("kv_b recompute", "fp8", (1, T, KVD, KV_LORA), "MLA", False),
        Role("q_b dgrad", "fp8", (1, T, Q_LORA, QD), "MLA", False),
        Role("kv_b dgrad", "fp8", (1, T, KV_LORA, KVD), "MLA", False),
        Role("kv_a dgrad", "fp8", (1, T, H, KV_LORA + D_ROPE), "MLA", False),
        Role("q_a dgrad", "fp8", (1, T, H, Q_LORA), "MLA", False),
    ),
    "attn(W)": (
        Role("o wgrad", "wgrad", (1, H, HEADS * D_V, T), "MLA", False),
        Role("kv_b wgrad", "wgrad", (1, KVD, KV_LORA, T), "MLA", False),
        Role("q_b wgrad", "wgrad", (1, QD, Q_LORA, T), "MLA", False),
        Role("kv_a wgrad", "wgrad", (1, KV_LORA + D_ROPE, H, T), "MLA", False),
        Role("q_a wgrad", "wgrad", (1, Q_LORA, H, T), "MLA", False),
    ),
}
GROUPS = ("MLA", "router", "shared expert", "routed experts")
#: The steps of a forward and of a backward layer, in execution order.
FWD = ("attn(F)", "dispatch(F)", "mlp(F)", "combine(F)")
BWD = ("combine(B)", "mlp(B)", "dispatch(B)", "mlp(W)", "attn(B)", "attn(W)")


class SegmentationError(ValueError):
    """The trace does not have the structure the segmentation expects."""


@dataclass(frozen=True)
class Kernel:
    """One GPU kernel of the profile as the segmentation sees it."""

    row: int
    name: str
    start_ns: int
    dur_ns: int
    ctas: int  # grid size (-1 unknown)
    comm: CommKernelInfo | None
    family: str | None  # GEMM family, None for other kernels

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass
class LayerPass:
    """One MoE layer in one direction: its annotations' kernels and its GEMMs' roles."""

    direction: str  # "fwd" or "bwd"
    layer: int  # 1-based, in execution order within the direction
    phases: dict[str, list[Kernel]] = field(default_factory=dict)
    gemms: list[tuple[Role, Kernel]] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.direction} {self.layer}"

    def comm(self, operation: str) -> list[Kernel]:
        """The pass's DeepEP kernels of one operation (``dispatch``, ``combine``, ``notify``)."""
        out = []
        for ks in self.phases.values():
            for k in ks:
                op = k.comm.operation if k.comm is not None else None
                if op is None:
                    continue
                if op == operation or (operation == "notify" and "notify" in op):
                    out.append(k)
        return out


def _family(name: str) -> str | None:
    return next((f for piece, f in FAMILIES if piece in name), None)


def kernels(trace: Trace) -> list[Kernel]:
    """Every kernel of the trace: its times, grid, communication info and GEMM family."""
    ev = trace.events
    rows = np.flatnonzero(trace.mask(EventKind.KERNEL))
    launches = trace.launches
    ctas = np.full(len(ev), -1, dtype=np.int64)
    ctas[launches.event] = np.where(
        launches.grid_x >= 0, launches.grid_x * launches.grid_y * launches.grid_z, -1
    )
    out = []
    for r in rows.tolist():
        name = trace.name(r)
        out.append(
            Kernel(
                r,
                name,
                int(ev.start_ns[r]),
                int(ev.dur_ns[r]),
                int(ctas[r]),
                parse_comm_kernel_name(name),
                _family(name),
            )
        )
    return out


def launch_times(trace: Trace) -> dict[int, int]:
    """Correlation id -> start of the CUDA runtime call that launched it."""
    ev = trace.events
    rt = np.flatnonzero(trace.mask(EventKind.RUNTIME) & (ev.correlation >= 0))
    return dict(zip(ev.correlation[rt].tolist(), ev.start_ns[rt].tolist(), strict=True))


def phases(trace: Trace) -> list[tuple[str, int, int]]:
    """The layer annotations (name, start, end) in start order."""
    ev = trace.events
    rows = np.flatnonzero(trace.mask(EventKind.USER_ANNOTATION))
    out = [
        (trace.name(r), int(ev.start_ns[r]), int(ev.end_ns[r]))
        for r in rows.tolist()
        if PHASE.match(trace.name(r))
    ]
    return sorted(out, key=lambda p: p[1])


def match_roles(phase: str, gemms: Sequence[Kernel], where: str) -> list[tuple[Role, Kernel]]:
    """Pair an annotation's GEMM kernels with its expected roles, or raise
    :class:`SegmentationError` when the kernel families differ from :data:`ROLES`."""
    roles = ROLES.get(phase, ())
    got = [k.family for k in gemms]
    want = [r.family for r in roles]
    if got != want:
        raise SegmentationError(
            f"{where} {phase}: GEMM kernels {got}, expected {want} (not DeepSeek's profile?)"
        )
    return list(zip(roles, gemms, strict=True))


def segment(trace: Trace) -> list[LayerPass]:
    """The profile's MoE layers, forward then backward, each in execution order."""
    ann = phases(trace)
    if not ann:
        raise SegmentationError("no attn/mlp/dispatch/combine(F|B|W) annotations")
    starts = np.array([a[1] for a in ann], dtype=np.int64)
    if any(nxt[1] < cur[2] for cur, nxt in itertools.pairwise(ann)):
        raise SegmentationError("layer annotations overlap (expected one thread's sequence)")
    passes: dict[tuple[str, int], LayerPass] = {}
    count = {"fwd": 0, "bwd": 0}
    owner: list[LayerPass] = []
    for name, start, _ in ann:
        direction = "fwd" if name.endswith("(F)") else "bwd"
        if name in ("attn(F)", "combine(B)"):
            count[direction] += 1
        if count[direction] == 0:
            raise SegmentationError(f"{name} at {start} ns comes before its layer's first step")
        key = (direction, count[direction])
        lp = passes.setdefault(key, LayerPass(direction, count[direction]))
        if name in lp.phases:
            raise SegmentationError(f"layer {lp.label}: {name} twice")
        lp.phases[name] = []
        owner.append(lp)
    launched = launch_times(trace)
    ev = trace.events
    for k in kernels(trace):
        t = launched.get(int(ev.correlation[k.row]))
        if t is None:
            continue
        i = int(np.searchsorted(starts, t, side="right")) - 1
        if i >= 0 and t < ann[i][2]:
            owner[i].phases[ann[i][0]].append(k)
    out = sorted(passes.values(), key=lambda p: (p.direction != "fwd", p.layer))
    for lp in out:
        want = FWD if lp.direction == "fwd" else BWD
        if sorted(lp.phases) != sorted(want):
            raise SegmentationError(f"layer {lp.label}: steps {list(lp.phases)}, expected {want}")
        for name, ks in lp.phases.items():
            gemms = [k for k in ks if k.family is not None]
            lp.gemms += match_roles(name, gemms, f"layer {lp.label}")
        ops = [len(lp.comm(op)) for op in ("dispatch", "combine")]
        if ops != [1, 1]:
            raise SegmentationError(f"layer {lp.label}: {ops[0]} dispatch, {ops[1]} combine")
    return out


# -- predictions ------------------------------------------------------------------------------


def predict_gemm_ns(role: Role, sms: int | None = None) -> float:
    """Shape-model time of a role on an H800, on ``sms`` SMs (default: all of them)."""
    gpu = gpu_preset(GPU)
    params = gemm_shape_params_for(gpu, role.dtype)
    if params is None:
        raise SystemExit(f"no GEMM shape constants for {GPU} {role.dtype}")
    n = gpu.sm_count if sms is None else sms
    peak = peak_for(gpu, role.dtype) * n / gpu.sm_count
    return float(gemm_times_ns(np.array([role.dims]), peak, n, params)[0])


def gemm_slowdown() -> float:
    """The published Hopper interference model's full-overlap slowdown of GEMMs."""
    return default_model("hopper").fit.class_factors()["gemm"]


def predict_deepep_ns(operation: str, sms: int) -> float:
    """DeepEP model's dispatch or combine of an EP64 layer on 8 x 8 H800, through the path the
    simulator's MoE layers take (a token once per destination rank and node, at most
    :data:`NODE_LIMIT` nodes)."""
    model = DeepEPModel(DeepEPParams(sms=sms))
    nbytes = T * TOPK * TOKEN_BYTES[operation]
    cluster = make_cluster(GPU, nodes=NODES)
    return float(
        routed_time_ns(
            model,
            nbytes,
            range(EP),
            cluster,
            EXPERTS,
            1.0,
            operation,
            top_k=TOPK,
            node_limit=NODE_LIMIT,
        )
    )


@dataclass(frozen=True)
class Activity:
    """The GPU's measured communication and compute as disjoint intervals."""

    comm: tuple[np.ndarray, np.ndarray]
    compute: tuple[np.ndarray, np.ndarray]

    @classmethod
    def of(cls, trace: Trace) -> Activity:
        work = gpu_work(trace)
        ev = trace.events
        s, e = ev.start_ns[work.rows], ev.end_ns[work.rows]
        c, p = work.labels == COMM, work.labels == COMPUTE
        return cls(union(s[c], e[c]), union(s[p], e[p]))

    def overlapped_ns(self, ks: Sequence[Kernel]) -> int:
        """Time of the kernels' spans during which compute runs."""
        total = 0
        for s, e in zip(*union([k.start_ns for k in ks], [k.end_ns for k in ks]), strict=True):
            total += measure(*clip(*self.compute, int(s), int(e))) if e > s else 0
        return total


def busy_ns(ks: Sequence[Kernel]) -> int:
    """Time at least one of the kernels runs."""
    return measure([k.start_ns for k in ks], [k.end_ns for k in ks])


def with_interference_ns(pairs: Sequence[tuple[Role, Kernel]], act: Activity) -> float:
    """Predicted GEMM durations summed, each started at its measured start and slowed where
    the GPU's measured communication runs (published Hopper model, rate rule)."""
    if not pairs:
        return 0.0
    start = np.array([k.start_ns for _, k in pairs], dtype=np.int64)
    work = np.array([predict_gemm_ns(r) for r, _ in pairs])
    end = finish_times(start, work, 1.0 / gemm_slowdown(), *act.comm)
    return float((end - start).sum())


# -- report -----------------------------------------------------------------------------------


def pct(pred: float, meas: float) -> str:
    return f"{100 * (pred - meas) / meas:+.1f}%" if meas else "n/a"


def ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def deepep_sms(passes: Sequence[LayerPass]) -> int:
    """The SM budget DeepEP ran with: its dispatch / combine kernels' grid (one CTA per SM)."""
    grids = {k.ctas for lp in passes for op in ("dispatch", "combine") for k in lp.comm(op)}
    if len(grids) != 1 or min(grids) < 1:
        raise SegmentationError(f"DeepEP kernels with grids {sorted(grids)}, expected one size")
    return grids.pop()


@dataclass(frozen=True)
class LayerRow:
    """Measured and predicted times (ns) of one layer pass."""

    gemms: int
    gemm_measured: int
    gemm_predicted: float
    gemm_interference: float
    dispatch_measured: int
    combine_measured: int
    notify_measured: int
    comm_busy: int
    comm_overlapped: int  # DeepEP time during which compute runs


def layer_row(lp: LayerPass, act: Activity) -> LayerRow:
    """The measured and predicted times of a layer pass (DeepEP predictions are per layer
    and the same for all: :func:`predict_deepep_ns`)."""
    (d,), (c,) = lp.comm("dispatch"), lp.comm("combine")
    notify = lp.comm("notify")
    comm = [d, c, *notify]
    return LayerRow(
        len(lp.gemms),
        busy_ns([k for _, k in lp.gemms]),
        sum(predict_gemm_ns(r) for r, _ in lp.gemms),
        with_interference_ns(lp.gemms, act),
        d.dur_ns,
        c.dur_ns,
        sum(k.dur_ns for k in notify),
        busy_ns(comm),
        act.overlapped_ns(comm),
    )


def _cells(r: LayerRow, dispatch: float, combine: float) -> str:
    return (
        f"{r.gemms} | {ms(r.gemm_measured)} | {ms(r.gemm_predicted)} | "
        f"{pct(r.gemm_predicted, r.gemm_measured)} | {ms(r.gemm_interference)} | "
        f"{pct(r.gemm_interference, r.gemm_measured)} | {ms(r.dispatch_measured)} | "
        f"{ms(dispatch)} | {pct(dispatch, r.dispatch_measured)} | {ms(r.combine_measured)} | "
        f"{ms(combine)} | {pct(combine, r.combine_measured)} | {ms(r.notify_measured)} | "
        f"{100 * r.comm_overlapped / r.comm_busy:.1f}%"
    )


def report(trace: Trace) -> None:
    """Print the three tables of docs/accuracy.md."""
    passes = segment(trace)
    act = Activity.of(trace)
    sms = deepep_sms(passes)
    gemm_sms = sorted({k.ctas for lp in passes for r, k in lp.gemms if r.family != "bf16"})
    pred = {op: predict_deepep_ns(op, sms) for op in ("dispatch", "combine")}
    print(
        f"{len(passes)} MoE layer passes; DeepEP kernels on {sms} CTAs (SM budget {sms}); FP8 "
        f"GEMMs on {gemm_sms} CTAs; published Hopper GEMM interference {gemm_slowdown():.3f}"
    )
    print(
        "\n| layer | GEMMs | GEMM measured (ms) | predicted | error | with interference "
        "| error | dispatch measured (ms) | predicted | error | combine measured (ms) "
        "| predicted | error | notify measured (ms) | DeepEP time overlapped with compute |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = [layer_row(lp, act) for lp in passes]
    for lp, r in zip(passes, rows, strict=True):
        print(f"| {lp.label} | {_cells(r, pred['dispatch'], pred['combine'])} |")
    total = LayerRow(*(sum(getattr(r, f) for r in rows) for f in LayerRow.__dataclass_fields__))
    n = len(passes)
    print(f"| **total** | {_cells(total, n * pred['dispatch'], n * pred['combine'])} |")
    groups_table(passes, act, gemm_sms)
    roles_table(passes)


def groups_table(passes: Sequence[LayerPass], act: Activity, gemm_sms: Sequence[int]) -> None:
    """GEMMs per group and direction over all layers, with the SM-count sensitivity."""
    sms = gemm_sms[0] if len(gemm_sms) == 1 else None
    print(
        "\n| direction | group | GEMMs | measured (ms) | predicted | error | with interference "
        f"| error | sensitivity: FP8 GEMMs on the {sms} SMs of their grid | error |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for direction in ("fwd", "bwd"):
        mine = [lp for lp in passes if lp.direction == direction]
        for group in GROUPS:
            per_pass = [[(r, k) for r, k in lp.gemms if r.group == group] for lp in mine]
            sel = [x for p in per_pass for x in p]
            meas = sum(busy_ns([k for _, k in p]) for p in per_pass)
            p = sum(predict_gemm_ns(r) for r, _ in sel)
            pi = with_interference_ns(sel, act)
            ps = sum(predict_gemm_ns(r, None if r.family == "bf16" else sms) for r, _ in sel)
            print(
                f"| {direction} | {group} | {len(sel)} | {ms(meas)} | {ms(p)} | {pct(p, meas)} | "
                f"{ms(pi)} | {pct(pi, meas)} | {ms(ps)} | {pct(ps, meas)} |"
            )


def beside_other_gemm(passes: Sequence[LayerPass]) -> set[int]:
    """Rows of GEMM kernels that ran while another GEMM kernel ran (two streams)."""
    ks = sorted((k for lp in passes for _, k in lp.gemms), key=lambda k: k.start_ns)
    out: set[int] = set()
    reach: Kernel | None = None  # the kernel that ends last among those started so far
    for k in ks:
        if reach is not None and k.start_ns < reach.end_ns:
            out |= {k.row, reach.row}
        if reach is None or k.end_ns > reach.end_ns:
            reach = k
    return out


def roles_table(passes: Sequence[LayerPass]) -> None:
    """Each GEMM role: its shape, mean measured kernel time over the layers, predicted."""
    print("\n| GEMM | dtype | (batch, M, N, K) | kernels | of them beside another GEMM "
          "| measured mean (µs) | predicted (µs) | error |")  # fmt: skip
    print("|---|---|---|---:|---:|---:|---:|---:|")
    beside = beside_other_gemm(passes)
    by_role: dict[tuple[str, Role], list[Kernel]] = {}
    for lp in passes:
        for r, k in lp.gemms:
            by_role.setdefault((lp.direction, r), []).append(k)
    for (direction, r), ks in by_role.items():
        meas = float(np.mean([k.dur_ns for k in ks]))
        p = predict_gemm_ns(r)
        mark = "" if r.ordered else " (order assumed)"
        print(
            f"| {direction} {r.label}{mark} | {r.dtype} | {r.dims} | {len(ks)} | "
            f"{sum(k.row in beside for k in ks)} | {meas / 1e3:.1f} | {p / 1e3:.1f} | "
            f"{pct(p, meas)} |"
        )


def main(argv: Sequence[str]) -> int:
    if len(argv) > 1:
        print("usage: python bench/deepseek_moe_layers.py [TRACE]", file=sys.stderr)
        return 2
    path = Path(argv[0]) if argv else TRACE
    if not path.is_file():
        print(f"{path}: no such file (the DeepSeek-V3 profile lives in ../shared)", file=sys.stderr)
        return 2
    try:
        trace = read_job([path]).traces[0]
        report(trace)
    except (EchoViewError, SegmentationError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
