"""The interference model the simulator applies: how much slower a compute op runs while
communication runs on its GPU.

A model gives each compute op a full-overlap slowdown ``s >= 1``; the engine then runs the op
at rate ``1 / s`` whenever a communication op is active on the same GPU and at rate 1 otherwise
(:mod:`echo_view.sim.interference.rates`), so rates change mid-flight as overlaps begin and end.

Models (:class:`InterferenceModel`):

- **Published defaults per GPU generation** (:func:`default_model`), constant per kernel class,
  used when no calibration is given. Sources are in :data:`PUBLISHED` and docs/interference.md.
- **Calibrated** (``echo-view calibrate interference``): a constant-per-class or fitted model
  (:mod:`echo_view.sim.interference.fit`) read from TOML (:func:`model_from_doc`).

Replay (:func:`replay_slowdowns`): a measured kernel's duration already holds the slowdown of
the overlap it had. With ``N`` ns measured alone and ``O`` overlapped, its solo time is
``N + O / s``; the replay runs that solo time and lets the engine slow it again wherever it
overlaps in the simulation, so a replay without changes reproduces the measurement and a
what-if that moves communication away removes the slowdown.

Workload configs (:func:`config_slowdowns`): a coarse op (a whole forward or backward pass)
gets the duration-weighted slowdown of its kernels, its collectives counted at 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.analysis.intervals import union
from echo_view.errors import ConfigError
from echo_view.model import GPU_WORK_KINDS, NONE, Job, Lane, LaneKind
from echo_view.model.columns import groups
from echo_view.model.gpus import GENERATIONS, gpu_generation
from echo_view.model.graph import OpClass
from echo_view.model.kinds import CollectiveKind
from echo_view.model.params import switch_value
from echo_view.model.toml_file import TomlDoc, dump_toml
from echo_view.model.workload import CLASS_COLLECTIVE, Workload
from echo_view.sim.interference.features import (
    comm_features,
    launch_config,
    trace_generation,
)
from echo_view.sim.interference.fit import CLASSES, InterferenceFit, KernelFeatures
from echo_view.sim.interference.measure import coverage, longest_overlap

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

_ECHO = "Echo (arXiv 2412.12487) motivation study: A100, DDP, 25 MB all-reduce"
_ECHO_T3 = "Echo Table 3, A800, CUDA 12.1"
_LEE = "Lee et al. (arXiv 2507.03114): 18.9% mean slowdown on A100/H100/MI250/MI210"
#: Full-overlap slowdown per class and GPU generation, from published measurements.
_AMPERE = {
    "gemm": 1.269,  # Echo: GEMM
    "attention": 1.269,  # no figure: tensor-core bound like GEMM
    "elementwise": 1.142,  # Echo: "Transform" kernels
    "reduction": 1.508,  # Echo: "Sum" kernels
    "normalization": 1.207,  # Echo Table 3: LayerNorm, A800 CUDA 12.1
    "embedding": 1.142,  # no figure: memory-bound like elementwise
    "optimizer": 1.142,  # no figure: multi-tensor elementwise
    "copy": 1.142,  # no figure: memory-bound like elementwise
    "other": 1.378,  # Echo: mean over all kernels (+37.76%)
}
_LEE_ALL = dict.fromkeys(CLASSES, 1.189)
DEFAULT_FACTORS: dict[str, dict[str, float]] = {
    "unknown": _AMPERE,
    "volta": _AMPERE,
    "turing": _AMPERE,
    "ampere": _AMPERE,
    "ada": _AMPERE,
    "hopper": _LEE_ALL,
    "blackwell": _LEE_ALL,
    "cdna2": _LEE_ALL,
    "cdna3": _LEE_ALL,
}
#: Where each generation's defaults come from.
PUBLISHED: dict[str, str] = {
    "ampere": f"{_ECHO}; normalization from {_ECHO_T3}",
    "hopper": _LEE,
    "blackwell": f"{_LEE} (no Blackwell figure; Hopper's)",
    "cdna2": _LEE,
    "cdna3": f"{_LEE} (no MI300 figure; CDNA2's)",
    "volta": f"{_ECHO} (no Volta figure; Ampere's)",
    "turing": f"{_ECHO} (no Turing figure; Ampere's)",
    "ada": f"{_ECHO} (no Ada figure; Ampere's)",
    "unknown": f"{_ECHO} (GPU unknown; Ampere's)",
}


@dataclass(frozen=True, eq=False)
class InterferenceModel:
    """A slowdown model and where it comes from. ``evaluation`` holds the held-out errors a
    calibration measured (empty for published defaults)."""

    fit: InterferenceFit
    source: str
    evaluation: Mapping[str, Any] = field(default_factory=dict)

    def slowdown(self, features: KernelFeatures) -> F64:
        """Full-overlap slowdown of each kernel (>= 1)."""
        return self.fit.slowdown(features)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.fit.kind, "source": self.source, "classes": self.fit.class_factors()}


def default_model(generation: int | str) -> InterferenceModel:
    """The published constant-per-class model of a GPU generation (code or name)."""
    name = GENERATIONS[generation] if isinstance(generation, int) else generation
    if name not in DEFAULT_FACTORS:
        raise ConfigError(f"unknown GPU generation {name!r}", hint=", ".join(GENERATIONS))
    factors = DEFAULT_FACTORS[name]
    coef = np.array([1.0 / factors[c] for c in CLASSES])
    return InterferenceModel(
        InterferenceFit("constant", coef, {}), f"published ({name}): {PUBLISHED[name]}"
    )


def model_to_toml(model: InterferenceModel) -> str:
    """The model as TOML (read back by :func:`model_from_doc`)."""
    d = model.fit.as_dict()
    doc: dict[str, Any] = {"kind": d["kind"], "source": model.source}
    # Settings of the fitted form sit at the top level, before the first table.
    doc |= {k: d[k] for k in ("form", "shrink", "solo_scale_ns", "generations") if k in d}
    doc |= {"coef": d["coef"], "samples": d["samples"], "evaluation": model.evaluation}
    return dump_toml(
        doc,
        "echo-view interference model (docs/interference.md): constant = full-overlap slowdown"
        " per class; fitted = excess slowdown g(solo) * (x . coef), scaled by shrink",
    )


def model_from_doc(doc: TomlDoc) -> InterferenceModel:
    """The model in a file written by ``echo-view calibrate interference`` (read by the
    caller)."""
    data = doc.data
    try:
        fit = InterferenceFit.from_dict(data)
    except (KeyError, ValueError, TypeError) as exc:
        # (a KeyError's text is the bare key: "'kind'")
        what = f"no key {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ConfigError(
            f"not an interference model: {what}",
            path=doc.path,
            hint="write one with `echo-view calibrate interference TRACE... -o FILE.toml`",
        ) from exc
    source = str(data.get("source", doc.path.name))
    return InterferenceModel(fit, source, data.get("evaluation", {}))


def model_from_setting(
    value: str, generation: int, file: TomlDoc | None = None
) -> InterferenceModel | None:
    """``--set interference=VALUE``: ``on`` (published defaults for ``generation``), ``off``
    (``None``) or the path of a calibrated model, whose ``file`` the caller has read
    (``echo_view.loading.setting_file``)."""
    on = switch_value(value)
    if on is not None:
        return default_model(generation) if on else None
    if file is None:
        path_like = value.strip().lower().endswith(".toml") or "/" in value
        raise ConfigError(
            f"no such model file: {value!r}"
            if path_like
            else f"interference must be on, off or a model file, got {value!r}",
            where="--set interference",
            hint="write a model with `echo-view calibrate interference TRACE... -o FILE.toml`",
        )
    return model_from_doc(file)


# -- ops of a workload ------------------------------------------------------------------------


def _device_id(lane: Lane) -> int:
    if lane.device != NONE:
        return int(lane.device)
    # Kineto's convention: a GPU stream's pid is the device index.
    return int(lane.pid) if isinstance(lane.pid, int) else NONE


def op_devices(workload: Workload) -> I64:
    """A dense id per (rank, GPU) for every op on a GPU stream; -1 for CPU ops."""
    lanes = workload.lanes
    gpu_lane = np.array([lane.kind == LaneKind.GPU_STREAM for lane in lanes], dtype=bool)
    dev = np.array([_device_id(lane) for lane in lanes], dtype=np.int64)
    # (rank, device) pairs as they are: a device number may be any int64 a trace gives.
    pairs = np.stack([workload.lane_rank.astype(np.int64), dev], axis=1)[gpu_lane]
    lane_dev = np.full(len(lanes), NONE, dtype=np.int64)
    if len(pairs):
        lane_dev[gpu_lane] = np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1)
    out: I64 = lane_dev[workload.ops.lane] if len(workload.ops) else np.empty(0, np.int64)
    return out


def _measured_overlap(dev: I64, start: I64, end: I64, c_ops: I64, k_ops: I64) -> I64:
    """Time each of ``k_ops`` overlaps the union of its GPU's ``c_ops``, all GPUs at once: each
    GPU's times are moved into a range of their own, the GPUs' spans back to back, so that no
    interval reaches another GPU's (their clocks may be days apart: separate captures). Where
    the spans add up past 2^62 ns, GPU by GPU."""
    rows = np.concatenate([c_ops, k_ops])
    d = dev[rows]
    n_dev = int(d.max()) + 1 if len(d) else 0
    lo = np.full(n_dev, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n_dev, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo, d, start[rows])
    np.maximum.at(hi, d, end[rows])
    offset, at = [], 0  # (Python ints: exact whatever the spans)
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        offset.append(at - a if b >= a else 0)
        at += b - a + 1 if b >= a else 0
    if at < 1 << 62:
        shift = np.array(offset, dtype=np.int64)
        cs, ks = shift[dev[c_ops]], shift[dev[k_ops]]
        us, ue = union(start[c_ops] + cs, end[c_ops] + cs)
        return coverage(us, ue, end[k_ops] + ks) - coverage(us, ue, start[k_ops] + ks)
    out = np.zeros(len(k_ops), dtype=np.int64)
    for c, k_sel in _per_gpu(dev, c_ops, k_ops):
        k = k_ops[k_sel]
        us, ue = union(start[c], end[c])
        out[k_sel] = coverage(us, ue, end[k]) - coverage(us, ue, start[k])
    return out


def _per_gpu(dev: I64, c_ops: I64, k_ops: I64) -> Iterator[tuple[I64, npt.NDArray[np.intp]]]:
    """For each GPU that runs any of ``k_ops``: its ``c_ops``, and the places in ``k_ops`` of
    its own (one sort each, not a mask per GPU over every op)."""
    comm_of = dict(groups(dev[c_ops]))
    none = np.empty(0, dtype=np.intp)
    for g, k_sel in groups(dev[k_ops]):
        yield c_ops[comm_of.get(g, none)], k_sel


def interference_ops(
    workload: Workload,
) -> tuple[I64, npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """``(device, comm, compute)``: each op's GPU id (-1 on CPU), the communication ops (GPU ops
    of class collective) and the compute ops that can be slowed (other GPU work on a GPU that
    also communicates)."""
    dev = op_devices(workload)
    gpu = dev >= 0
    comm = gpu & (workload.ops.op_class == CLASS_COLLECTIVE)
    has_comm = np.zeros(int(dev.max()) + 1 if len(dev) and gpu.any() else 0, dtype=bool)
    has_comm[dev[comm]] = True
    kinds = np.isin(workload.ops.kind, [int(k) for k in GPU_WORK_KINDS])
    compute = gpu & ~comm & kinds
    compute[compute] &= has_comm[dev[compute]]
    return dev, comm, compute


@dataclass(frozen=True, eq=False)
class ReplaySlowdowns:
    """Per op of a replayed workload: the full-overlap slowdown (1 where none applies), the
    measured overlapped time and the solo duration with the measured slowdown removed."""

    slowdown: F64
    overlap_ns: I64
    solo_ns: I64
    #: :func:`interference_ops` of the workload.
    ops: tuple[I64, npt.NDArray[np.bool_], npt.NDArray[np.bool_]] | None = None


def replay_slowdowns(workload: Workload, job: Job, model: InterferenceModel) -> ReplaySlowdowns:
    """Slowdowns of a workload reconstructed from ``job`` and the solo durations of its
    kernels (see the module docstring)."""
    n = len(workload)
    dur = workload.ops.dur_ns.astype(np.int64)
    slow = np.ones(n)
    overlap = np.zeros(n, dtype=np.int64)
    dev, comm, compute = interference_ops(workload)
    if workload.measured_start_ns is None or workload.measured_end_ns is None or not compute.any():
        return ReplaySlowdowns(slow, overlap, dur.copy(), (dev, comm, compute))
    mstart = np.asarray(workload.measured_start_ns, dtype=np.int64)
    mend = np.asarray(workload.measured_end_ns, dtype=np.int64)
    ops = workload.ops
    feats = _empty_features(n)
    # Launch configurations and collectives are read only for a model that uses them.
    traces = job.traces if model.fit.uses_features else ()
    wanted = np.flatnonzero((compute | comm) & (ops.source >= 0)) if traces else np.empty(0, int)
    of_rank = dict(groups(ops.rank[wanted]))
    for trace in traces:
        mine = wanted[of_rank.get(trace.rank, np.empty(0, dtype=np.intp))]
        if not len(mine):
            continue
        cfg = launch_config(trace)
        rows = ops.source[mine].astype(np.int64)
        feats["grid_blocks"][mine] = cfg["grid_blocks"][rows]
        feats["occupancy"][mine] = cfg["occupancy"][rows]
        sm = next((d.sm_count for d in trace.devices if d.sm_count), None)
        feats["sm_count"][mine] = sm if sm else NONE
        feats["generation"][mine] = trace_generation(trace)
        is_comm = comm[mine]
        kind, proto, chan = comm_features(trace, rows[is_comm], cfg["grid_x"])
        feats["comm_kind"][mine[is_comm]] = kind
        feats["comm_protocol"][mine[is_comm]] = proto
        feats["comm_channels"][mine[is_comm]] = chan
    c_all, k_all = np.flatnonzero(comm), np.flatnonzero(compute)
    overlap[k_all] = _measured_overlap(dev, mstart, mend, c_all, k_all)
    for c_ops, k_sel in _per_gpu(dev, c_all, k_all) if model.fit.uses_features else ():
        k_ops = k_all[k_sel]
        cs, ce = mstart[c_ops], mend[c_ops]
        ov = overlap[k_ops]
        # Each kernel meets the collective that overlapped it longest, else the one that
        # communicates most on its GPU.
        kinds = feats["comm_kind"][c_ops]
        top = int(np.argmax(np.bincount(kinds.clip(0), weights=(ce - cs).astype(np.float64))))
        of_top = np.flatnonzero(kinds == top)
        main = c_ops[of_top[int(np.argmax((ce - cs)[of_top]))]]
        partner = np.full(len(k_ops), main, dtype=np.int64)
        hit = ov > 0
        if hit.any():
            partner[hit] = c_ops[longest_overlap(mstart[k_ops[hit]], mend[k_ops[hit]], cs, ce)]
        for col in ("comm_kind", "comm_protocol", "comm_channels"):
            feats[col][k_ops] = feats[col][partner]
    k = k_all
    features = KernelFeatures(
        op_class=ops.op_class[k].astype(np.int64),
        solo_ns=dur[k],
        grid_blocks=feats["grid_blocks"][k],
        sm_count=feats["sm_count"][k],
        occupancy=feats["occupancy"][k],
        comm_kind=feats["comm_kind"][k],
        comm_protocol=feats["comm_protocol"][k],
        comm_channels=feats["comm_channels"][k],
        generation=feats["generation"][k],
    )
    slow[k] = model.slowdown(features)
    alone = dur - overlap
    solo = np.where(compute, np.rint(alone + overlap / slow), dur).astype(np.int64)
    return ReplaySlowdowns(slow, overlap, np.maximum(solo, 0), (dev, comm, compute))


def _empty_features(n: int) -> dict[str, Any]:
    minus = np.full(n, NONE, dtype=np.int64)
    return {
        "grid_blocks": minus.copy(),
        "sm_count": minus.copy(),
        "occupancy": np.full(n, np.nan),
        "comm_kind": np.full(n, int(CollectiveKind.UNKNOWN), dtype=np.int64),
        "comm_protocol": np.zeros(n, dtype=np.int64),
        "comm_channels": minus.copy(),
        "generation": np.zeros(n, dtype=np.int64),
    }


def gemm_slowdown_of(
    model: InterferenceModel | None, gpu_name: str
) -> Callable[[float], float] | None:
    """How much slower ``model`` says a GEMM of ``g`` ns runs on ``gpu_name`` beside a
    collective, as a function of ``g`` (``None`` without a model: no slowdown). Used for
    collectives overlapped with a GEMM inside a pass (:mod:`echo_view.sim.tp_overlap`)."""
    if model is None:
        return None
    gen = gpu_generation(gpu_name)

    def slowdown(g: float) -> float:
        f = KernelFeatures.of_classes(
            np.array([int(OpClass.GEMM)]), np.array([round(g)]), generation=gen
        )
        return float(model.slowdown(f)[0])

    return slowdown


def config_slowdowns(composed: Any, model: InterferenceModel, gpu_name: str) -> F64:
    """Per op of a composed workload (:class:`echo_view.sim.compose.Composed`): the slowdown
    of its kernels, duration-weighted over a coarse op's kernels with its collectives at 1."""
    wl: Workload = composed.workload
    n = len(wl)
    out = np.ones(n)
    _, _, compute = interference_ops(wl)
    if not compute.any():
        return out
    gen = gpu_generation(gpu_name)
    tables = composed.tables
    ids = np.flatnonzero(compute)
    src = composed.src_table[ids]
    coarse = src >= 0
    # Ops with no fine kernels behind them: their own class.
    own = ids[~coarse]
    if len(own):
        f = KernelFeatures.of_classes(wl.ops.op_class[own], wl.ops.dur_ns[own], generation=gen)
        out[own] = model.slowdown(f)
    ids, src = ids[coarse], src[coarse]
    if not len(ids):
        return out
    sizes = np.array([len(t.table) for t in tables], dtype=np.int64)
    toff = np.concatenate([[0], np.cumsum(sizes)])
    fine_dur = np.concatenate([t.dur_ns for t in tables]).astype(np.float64)
    fine_cls = np.concatenate([t.table.op_class for t in tables]).astype(np.int64)
    is_coll = fine_cls == CLASS_COLLECTIVE
    f = KernelFeatures.of_classes(fine_cls, fine_dur.astype(np.int64), generation=gen)
    fine_s = np.where(is_coll, 1.0, model.slowdown(f))
    # Duration-weighted mean over each coarse op's range, by prefix sums.
    cum_d = np.concatenate([[0.0], np.cumsum(fine_dur)])
    cum_ds = np.concatenate([[0.0], np.cumsum(fine_dur * fine_s)])
    lo = toff[src] + composed.src_lo[ids]
    hi = toff[src] + composed.src_hi[ids]
    total = cum_d[hi] - cum_d[lo]
    weighted = cum_ds[hi] - cum_ds[lo]
    out[ids] = np.where(total > 0, weighted / np.maximum(total, 1e-9), 1.0)
    return out


__all__ = [
    "DEFAULT_FACTORS",
    "PUBLISHED",
    "InterferenceModel",
    "ReplaySlowdowns",
    "config_slowdowns",
    "default_model",
    "interference_ops",
    "model_from_doc",
    "model_from_setting",
    "model_to_toml",
    "op_devices",
    "replay_slowdowns",
]
