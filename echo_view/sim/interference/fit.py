"""Interference models fitted to overlapped samples, the rate arithmetic they share with the
simulator, and their held-out evaluation.

**Rate model.** A compute kernel with solo time ``w`` progresses at rate 1 while no
communication runs on its GPU and at rate ``u = 1 / s`` while some does (``s >= 1`` is its
full-overlap slowdown). Measured with ``N`` ns alone and ``O`` ns overlapped, it did
``w = N + u * O`` of work; the overlap fraction enters through that split (Echo's
``t = (1 - r) t_solo + r t_solo s`` with ``r`` the overlapped share of the solo work).

**Models.**

- ``constant``: ``u = x . beta`` with ``x`` the one-hot kernel class, so one factor per class
  (the baseline).
- ``fitted``: the excess ``1 - u = shrink * g(solo) * (x . beta)``, where
  ``g = 1 / (1 + solo / scale)`` makes the slowdown vanish for long kernels (measured: kernels
  over 100 µs barely slow down; the solo time enters only here, so the slowdown never grows
  with it) and ``x`` is the class one-hot plus the grid size per SM (log2 waves), the
  achieved occupancy, the overlapping collective (all-reduce, all-gather, reduce-scatter,
  send/recv, other), its NCCL protocol (LL, LL128, Simple) and channel count (log2), and the
  GPU generation. Missing values contribute 0. A known GPU generation the model was not
  fitted on gets no slowdown (it does not extrapolate to hardware it has not seen);
  ``scale`` (:data:`SOLO_SCALES_NS`) and ``shrink`` (:data:`SHRINKS`) are tuned by
  cross-validation within the fitting samples.

Both are fitted by least squares of the relative residual ``(w - N - u O) / D`` — linear in
``beta`` — made robust by Huber reweighting; ``fitted`` has a ridge penalty on every term,
pulling what the data do not support to no slowdown. Predictions clip ``s`` to
``[1, MAX_SLOWDOWN]``.

The rate arithmetic is in :mod:`echo_view.sim.interference.measured_rates`, the held-out
evaluation in :mod:`echo_view.sim.interference.evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.collectives import COLLECTIVES
from echo_view.model.gpus import GENERATIONS
from echo_view.model.kinds import CollectiveKind
from echo_view.model.workload import CLASS_COLLECTIVE, OP_CLASS_NAMES
from echo_view.sim.interference.features import PROTOCOLS
from echo_view.sim.interference.measure import OverlapSamples
from echo_view.sim.interference.measured_rates import predict_durations

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: The largest full-overlap slowdown a model predicts (Echo saw up to 8x on GPT-2 kernels).
MAX_SLOWDOWN = 8.0
CLASSES: tuple[str, ...] = tuple(c for c in OP_CLASS_NAMES if c != "collective")
#: Collective groups the fitted model tells apart (others -> ``other``).
COMM_GROUPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "send_recv", "other")
_COMM_GROUP_OF = {int(c.kind): COMM_GROUPS.index(c.interference_group) for c in COLLECTIVES}


@dataclass(frozen=True, eq=False)
class KernelFeatures:
    """Features of compute kernels, as columns (-1 / NaN where unknown)."""

    op_class: I64
    solo_ns: I64
    grid_blocks: I64
    sm_count: I64
    occupancy: F64
    comm_kind: I64
    comm_protocol: I64
    comm_channels: I64
    generation: I64

    def __len__(self) -> int:
        return len(self.op_class)

    @classmethod
    def from_samples(cls, s: OverlapSamples) -> KernelFeatures:
        c = s.cols
        return cls(
            op_class=c["op_class"],
            solo_ns=c["solo_ns"],
            grid_blocks=c["grid_blocks"],
            sm_count=c["sm_count"],
            occupancy=c["occupancy"],
            comm_kind=c["comm_kind"],
            comm_protocol=c["comm_protocol"],
            comm_channels=c["comm_channels"],
            generation=c["generation"],
        )

    @classmethod
    def of_classes(
        cls,
        op_class: npt.ArrayLike,
        solo_ns: npt.ArrayLike | None = None,
        *,
        generation: int = 0,
        comm_kind: npt.ArrayLike | int = int(CollectiveKind.UNKNOWN),
    ) -> KernelFeatures:
        """Features that know only the class (and optionally solo time, generation and the
        overlapping collective): what a cost-model workload can tell."""
        oc = np.asarray(op_class, dtype=np.int64)
        n = len(oc)
        minus = np.full(n, -1, dtype=np.int64)
        return cls(
            op_class=oc,
            solo_ns=minus if solo_ns is None else np.asarray(solo_ns, dtype=np.int64),
            grid_blocks=minus,
            sm_count=minus,
            occupancy=np.full(n, np.nan),
            comm_kind=np.broadcast_to(np.asarray(comm_kind, dtype=np.int64), (n,)).copy(),
            comm_protocol=np.zeros(n, dtype=np.int64),
            comm_channels=minus,
            generation=np.full(n, generation, dtype=np.int64),
        )


def feature_names(kind: str) -> tuple[str, ...]:
    """Names of the regressors of a model ``kind`` (``constant`` or ``fitted``)."""
    names = [f"class.{c}" for c in CLASSES]
    if kind == "constant":
        return tuple(names)
    names += ["log2_waves", "occupancy"]
    names += [f"comm.{g}" for g in COMM_GROUPS[:-1]]
    names += [f"protocol.{p}" for p in PROTOCOLS[1:]]
    names += ["log2_channels"]
    names += [f"gpu.{g}" for g in GENERATIONS[1:]]
    return tuple(names)


def design(f: KernelFeatures, kind: str) -> F64:
    """The regressor matrix ``x`` (one row per kernel) of a model ``kind``."""
    n = len(f)
    cls = np.asarray(f.op_class, dtype=np.int64)
    cls = np.where((cls >= 0) & (cls < len(CLASSES)), cls, OP_CLASS_NAMES.index("other"))
    cls = np.where(cls == CLASS_COLLECTIVE, OP_CLASS_NAMES.index("other"), cls)
    onehot = np.zeros((n, len(CLASSES)))
    onehot[np.arange(n), cls] = 1.0
    if kind == "constant":
        return onehot
    if kind != "fitted":
        raise ValueError(f"unknown interference model kind {kind!r}")
    blocks = np.asarray(f.grid_blocks, dtype=np.float64)
    sms = np.asarray(f.sm_count, dtype=np.float64)
    known_w = (blocks > 0) & (sms > 0)
    waves = np.where(known_w, np.log2(np.maximum(blocks, 1) / np.maximum(sms, 1)), 0.0)
    occ = np.asarray(f.occupancy, dtype=np.float64)
    occ = np.where(np.isfinite(occ), occ - 0.5, 0.0)
    group = np.array(
        [_COMM_GROUP_OF.get(int(k), len(COMM_GROUPS) - 1) for k in np.asarray(f.comm_kind)],
        dtype=np.int64,
    ) if n else np.zeros(0, dtype=np.int64)  # fmt: skip
    comm = np.zeros((n, len(COMM_GROUPS) - 1))
    has = group < len(COMM_GROUPS) - 1
    comm[np.flatnonzero(has), group[has]] = 1.0
    proto = np.asarray(f.comm_protocol, dtype=np.int64)
    protocol = np.zeros((n, len(PROTOCOLS) - 1))
    known_p = (proto > 0) & (proto < len(PROTOCOLS))
    protocol[np.flatnonzero(known_p), proto[known_p] - 1] = 1.0
    ch = np.asarray(f.comm_channels, dtype=np.float64)
    log_ch = np.where(ch > 0, np.log2(np.maximum(ch, 1.0)) - 3.0, 0.0)
    gen = np.asarray(f.generation, dtype=np.int64)
    gpu = np.zeros((n, len(GENERATIONS) - 1))
    known_g = (gen > 0) & (gen < len(GENERATIONS))
    gpu[np.flatnonzero(known_g), gen[known_g] - 1] = 1.0
    return np.column_stack([onehot, waves, occ, comm, protocol, log_ch, gpu])


#: Solo time (ns) at which the fitted model's excess slowdown is half its short-kernel value,
#: when it is not tuned.
SOLO_SCALE_NS = 10_000
#: Solo-time scales that tuning (cross-validation within the fitting samples) chooses from.
SOLO_SCALES_NS: tuple[float, ...] = (3_000, 10_000, 30_000, 100_000)
#: Solo-time scales a model file may give (1 ns to 1,000 s: a kernel's time; at 1e-300 the
#: weights of long kernels overflow).
SOLO_SCALE_RANGE_NS = (1.0, 1e12)
#: Shrink factors of the fitted excess that tuning chooses from.
SHRINKS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)


def solo_weight(solo_ns: npt.ArrayLike, scale_ns: float = SOLO_SCALE_NS) -> F64:
    """``g = 1 / (1 + solo / scale)``: 1 for tiny kernels, 0 for long ones (0.5 where the
    solo time is unknown)."""
    solo = np.asarray(solo_ns, dtype=np.float64)
    out: F64 = np.where(solo > 0, 1.0 / (1.0 + np.maximum(solo, 1.0) / scale_ns), 0.5)
    return out


@dataclass(frozen=True, eq=False)
class InterferenceFit:
    """A fitted model (see the module docstring). ``samples`` counts the samples per class it
    was fitted on. For ``fitted``: ``shrink`` scales the excess (chosen by nested
    cross-validation), ``generations`` are the GPU generation codes it was fitted on (a known
    generation outside them gets no slowdown; empty: no restriction)."""

    kind: str
    coef: F64
    samples: Mapping[str, int]
    shrink: float = 1.0
    generations: tuple[int, ...] = ()
    solo_scale_ns: float = SOLO_SCALE_NS

    @property
    def names(self) -> tuple[str, ...]:
        return feature_names(self.kind)

    @property
    def uses_features(self) -> bool:
        """Whether the model reads more than the kernel class."""
        return self.kind != "constant"

    def slowdown(self, f: KernelFeatures) -> F64:
        """Full-overlap slowdown ``s`` of each kernel, in ``[1, MAX_SLOWDOWN]``."""
        x = design(f, self.kind) @ self.coef
        if self.kind == "constant":
            u = x
        else:
            excess = self.shrink * solo_weight(f.solo_ns, self.solo_scale_ns) * x
            if self.generations:
                gen = np.asarray(f.generation, dtype=np.int64)
                unseen = (gen > 0) & ~np.isin(gen, np.asarray(self.generations, dtype=np.int64))
                excess = np.where(unseen, 0.0, excess)
            u = 1.0 - excess
        out: F64 = 1.0 / np.clip(u, 1.0 / MAX_SLOWDOWN, 1.0)
        return out

    def class_factors(self) -> dict[str, float]:
        """The slowdown of each class with every other feature unknown."""
        s = self.slowdown(KernelFeatures.of_classes(np.arange(len(CLASSES))))
        return {c: float(v) for c, v in zip(CLASSES, s.tolist(), strict=True)}

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "coef": {n: float(c) for n, c in zip(self.names, self.coef.tolist(), strict=True)},
            "samples": dict(self.samples),
        }
        if self.kind != "constant":
            out["form"] = "excess"
            out["shrink"] = self.shrink
            out["generations"] = [GENERATIONS[g] for g in self.generations]
            out["solo_scale_ns"] = self.solo_scale_ns
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> InterferenceFit:
        """Inverse of :meth:`as_dict`; unknown coefficient names raise ``ValueError``."""
        kind = str(d["kind"])
        if kind not in ("constant", "fitted"):
            raise ValueError(f"unknown model kind {kind!r} (constant or fitted)")
        names = feature_names(kind)
        given = dict(d.get("coef", {}))
        extra = sorted(set(given) - set(names))
        if extra:
            raise ValueError(f"unknown coefficients {', '.join(extra)}")
        for name, value in given.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"coefficient {name} is {value!r}, not a number")
            if not np.isfinite(value):
                raise ValueError(f"coefficient {name} is {value!r}, not a finite number")
        samples = {str(k): _count(v, f"samples.{k}") for k, v in dict(d.get("samples", {})).items()}
        if kind == "constant":
            coef = np.array([float(given.get(n, 1.0 if n.startswith("class.") else 0.0))
                             for n in names])  # fmt: skip
            return cls(kind, coef, samples)
        if d.get("form", "excess") != "excess":
            raise ValueError(f"unknown fitted model form {d.get('form')!r}")
        gens = [str(g) for g in d.get("generations", [])]
        bad = sorted(set(gens) - set(GENERATIONS))
        if bad:
            raise ValueError(f"unknown GPU generations {', '.join(bad)}")
        coef = np.array([float(given.get(n, 0.0)) for n in names])
        shrink = _number(d.get("shrink", 1.0), "shrink")
        scale = _number(d.get("solo_scale_ns", SOLO_SCALE_NS), "solo_scale_ns")
        if not 0.0 <= shrink <= 1.0:
            raise ValueError(f"shrink is {shrink}, not within [0, 1]")
        if not SOLO_SCALE_RANGE_NS[0] <= scale <= SOLO_SCALE_RANGE_NS[1]:
            lo, hi = SOLO_SCALE_RANGE_NS
            raise ValueError(f"solo_scale_ns is {scale:g}, not within [{lo:g}, {hi:g}] ns")
        return cls(
            kind,
            coef,
            samples,
            shrink=shrink,
            generations=tuple(GENERATIONS.index(g) for g in gens),
            solo_scale_ns=scale,
        )


def _count(value: Any, name: str) -> int:
    """A sample count from a model file (a whole number, 0 to 10^12), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e12:
        raise ValueError(f"{name} is {value!r}, not a count of samples")
    if value != int(value):
        raise ValueError(f"{name} is {value!r}, not a whole number")
    return int(value)


def _number(value: Any, name: str) -> float:
    """A finite number from a model file, else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise ValueError(f"{name} is {value!r}, not a finite number")
    return float(value)


def _regression(
    samples: OverlapSamples, kind: str, solo_scale_ns: float = SOLO_SCALE_NS
) -> tuple[F64, F64, F64]:
    """``(a, y, x)``: the residual ``y - a . beta`` of every sample is its relative duration
    error under the rate model; ``x`` is the design."""
    c = samples.cols
    d = np.maximum(c["dur_ns"], 1).astype(np.float64)
    frac = c["overlap_ns"] / d
    n_alone = (c["dur_ns"] - c["overlap_ns"]).astype(np.float64)
    y = (c["solo_ns"] - n_alone) / d  # = frac * u
    x = design(KernelFeatures.from_samples(samples), kind)
    if kind == "constant":
        return x * frac[:, None], y, x
    # u = 1 - g x.beta: y - frac = -(frac g x) . beta
    g = solo_weight(c["solo_ns"], solo_scale_ns)
    return -(frac * g)[:, None] * x, y - frac, x


def fit(
    samples: OverlapSamples,
    kind: str = "fitted",
    *,
    ridge: float = 1.0,
    huber: float = 0.1,
    iterations: int = 20,
    weight_power: float = 0.0,
    solo_scale_ns: float = SOLO_SCALE_NS,
    tune_by: str | None = None,
    restrict_generations: bool = True,
) -> InterferenceFit:
    """Fit a model ``kind`` to ``samples`` (see the module docstring). ``huber`` is the
    residual (share of the duration) beyond which a sample's weight decays; ``ridge`` the
    penalty on non-class terms (in units of one fully overlapped sample; ``fitted`` also puts
    it on the class terms, pulling them to no slowdown).

    ``tune_by`` (``job``, ``trace`` or ``step``) chooses the fitted model's solo-time scale
    (:data:`SOLO_SCALES_NS`) and shrink factor (:data:`SHRINKS`) by cross-validation over
    ``samples`` split that way — the samples given only, so that a held-out evaluation that
    calls this on its training folds stays blind; ``None`` keeps ``solo_scale_ns`` and shrink
    1. ``restrict_generations=False`` lets the model apply to GPU generations it was not
    fitted on."""
    if kind == "fitted" and tune_by is not None:
        args: dict[str, Any] = {"ridge": ridge, "huber": huber, "iterations": iterations}
        args.update(weight_power=weight_power, restrict_generations=restrict_generations)
        scale, shrink = _tune(samples, tune_by, args)
        model = fit(samples, kind, solo_scale_ns=scale, **args)
        return replace(model, shrink=shrink)
    a, y, _ = _regression(samples, kind, solo_scale_ns)
    k = a.shape[1]
    n_cls = len(CLASSES)
    penalty = np.zeros(k)
    penalty[n_cls:] = ridge
    prior = np.zeros(k)
    if kind == "constant":
        # Classes without samples keep u = 1 (no slowdown): a tiny pull to 1 on every class.
        prior[:n_cls] = 1.0
        penalty[:n_cls] = 1e-6
    else:
        penalty[:n_cls] = ridge
    c = samples.cols
    d = np.maximum(c["dur_ns"], 1).astype(np.float64)
    base = d**weight_power
    base = base / base.mean() if len(base) else base
    w = np.ones(len(y))
    coef = prior.copy()
    for _ in range(max(iterations, 1)):
        aw = a * (w * base)[:, None]
        lhs = aw.T @ a + np.diag(penalty)
        rhs = aw.T @ y + penalty * prior
        coef = np.linalg.solve(lhs, rhs)
        r = np.abs(y - a @ coef)
        w = np.where(r <= huber, 1.0, huber / np.maximum(r, 1e-12))
    counts = np.bincount(
        np.clip(c["op_class"], 0, len(OP_CLASS_NAMES) - 1), minlength=len(OP_CLASS_NAMES)
    )
    per_class = {name: int(counts[i]) for i, name in enumerate(CLASSES) if counts[i]}
    if kind == "constant":
        return InterferenceFit(kind, coef, per_class)
    gens = tuple(int(g) for g in np.unique(c["generation"]) if g > 0)
    return InterferenceFit(
        kind,
        coef,
        per_class,
        generations=gens if restrict_generations else (),
        solo_scale_ns=solo_scale_ns,
    )


def _tune(samples: OverlapSamples, by: str, fit_args: Mapping[str, Any]) -> tuple[float, float]:
    """The (solo scale, shrink) pair with the lowest summed absolute duration error over
    ``samples`` split ``by`` (step: alternate pairs of steps, as the samples may be one step
    parity already). Ties keep the earlier pair; with no usable split, the defaults."""
    c = samples.cols
    if by == "step":
        tests = [(c["step"] >= 0) & ((c["step"] // 2) % 2 == p) for p in (0, 1)]
    else:
        tests = folds(samples, by)
    err = np.zeros((len(SOLO_SCALES_NS), len(SHRINKS)))
    used = False
    for test in tests:
        if not test.any() or test.all():
            continue
        used = True
        held = samples.select(test)
        feats = KernelFeatures.from_samples(held)
        measured = held.cols["dur_ns"]
        for i, scale in enumerate(SOLO_SCALES_NS):
            base = fit(samples.select(~test), "fitted", solo_scale_ns=scale, **fit_args)
            for j, sh in enumerate(SHRINKS):
                p = predict_durations(held, replace(base, shrink=sh).slowdown(feats))
                err[i, j] += float(np.abs(p - measured).sum())
    if not used:
        return SOLO_SCALE_NS, 1.0
    best_scale, best_shrink = np.unravel_index(int(np.argmin(err)), err.shape)
    return SOLO_SCALES_NS[int(best_scale)], SHRINKS[int(best_shrink)]


def folds(samples: OverlapSamples, by: str) -> list[npt.NDArray[np.bool_]]:
    """Test masks of a held-out split: ``job`` (one fold per measured job: the part of a
    source name before ``#``), ``trace`` (one per trace) or ``step`` (even vs odd steps of
    every trace; kernels in no step are left out)."""
    c = samples.cols
    if by in ("job", "trace"):
        names = [src.split("#")[0] if by == "job" else src for src in samples.sources]
        uniq = sorted(set(names))
        of_trace = np.array([uniq.index(n) for n in names], dtype=np.int64)
        group = of_trace[c["trace"]] if len(c["trace"]) else c["trace"]
        return [group == g for g in range(len(uniq)) if (group == g).any()]
    if by == "step":
        stepped = c["step"] >= 0
        return [stepped & (c["step"] % 2 == p) for p in (0, 1)]
    raise ValueError(f"unknown split {by!r} (job, trace or step)")


__all__ = [
    "CLASSES",
    "MAX_SLOWDOWN",
    "SHRINKS",
    "SOLO_SCALES_NS",
    "SOLO_SCALE_NS",
    "InterferenceFit",
    "KernelFeatures",
    "design",
    "feature_names",
    "fit",
    "folds",
    "solo_weight",
]
