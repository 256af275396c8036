"""Whole simulation runs as ``echo-view simulate`` and the Python API perform them: a measured
job replayed (with what-if knobs), or a workload config predicted from its traced graph.

Knobs are ``KEY=VALUE`` strings (``--set`` on the command line). For a measured job:
``cluster.<key>`` (:data:`echo_view.sim.cluster.OVERRIDE_KEYS`), ``compute.scale.<class>``
(:data:`echo_view.sim.compute.SCALE_KEYS`), ``comm.scale``, ``interference`` (``on``, the
default, ``off`` or a model file). For a config: ``cluster.<key>``, ``compute.<parameter>``
(a kernel cost parameter), ``compute.scale.<class>`` (an op class or ``all``), ``comm.scale``,
``interference``, ``host.<parameter>`` and ``parallel.<key>`` for the simulation-only parallel
keys (:mod:`echo_view.model.config_settings`). The report dictionaries are the ``simulate
--json`` objects (documented in :mod:`echo_view.cli.simulate` and
:mod:`echo_view.cli.simulate_workload`) without ``input`` and ``seconds``.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from echo_view.analysis.summary import summarize
from echo_view.errors import ConfigError, in_file, known_keys_hint
from echo_view.model.config import WorkloadConfig
from echo_view.model.config_settings import PARALLEL_SET_KEYS, with_parallel_settings
from echo_view.model.gpus import gpu_generation
from echo_view.model.graph import TracedGraph
from echo_view.model.job import ClockAlignment, Job
from echo_view.model.toml_file import TomlDoc
from echo_view.model.workload import OP_CLASS_NAMES
from echo_view.sim import MeasuredCompute, predicted_job
from echo_view.sim.bound import step_bound
from echo_view.sim.cluster import (
    DEPRECATED_KEYS,
    OVERRIDE_KEYS,
    Cluster,
    cluster_from_config,
    make_cluster,
    match_gpu,
)
from echo_view.sim.comm.defaults import default_comm_model
from echo_view.sim.compute import MAX_SCALE, SCALE_KEYS
from echo_view.sim.compute_presets import compute_params_for, compute_params_from_doc
from echo_view.sim.config_sim import ConfigSimulation, predicted_config_job, simulate_config
from echo_view.sim.host import HostParams
from echo_view.sim.interference import model_from_setting
from echo_view.sim.interference.features import trace_generation
from echo_view.sim.interference.simulate import simulate_replay
from echo_view.sim.kernel_cost import ComputeParams
from echo_view.sim.memory import memory_report
from echo_view.sim.moe import moe_report
from echo_view.sim.replay import ReplayInfo, workload_from_job
from echo_view.sim.report import compare, job_steps
from echo_view.sim.throughput import throughput
from echo_view.units import parse_number

#: Knobs of a measured job's replay.
REPLAY_KEYS: tuple[str, ...] = (
    *(f"cluster.{k}" for k in OVERRIDE_KEYS),
    *(f"compute.scale.{k}" for k in SCALE_KEYS),
    "comm.scale",
    "interference",
)
_PARAM_KEYS = tuple(f"compute.{name}" for name in ComputeParams.specs())
_HOST_KEYS = tuple(f"host.{name}" for name in HostParams.specs())
_SCALE_KEYS = tuple(f"compute.scale.{c}" for c in (*OP_CLASS_NAMES[:-1], "all"))
#: Knobs of a workload config's prediction.
WORKLOAD_KEYS: tuple[str, ...] = (
    *(f"cluster.{k}" for k in OVERRIDE_KEYS), *_PARAM_KEYS, *_SCALE_KEYS, "comm.scale",
    "interference", *_HOST_KEYS, *PARALLEL_SET_KEYS,
)  # fmt: skip


def scale_value(key: str, value: str) -> float:
    """A scale-factor knob's value: a number from 0 to :data:`MAX_SCALE`."""
    try:
        # A plain ASCII number, as for every other knob: float() also read "１２" and "1_2".
        x = parse_number(value.strip())
    except (ValueError, AttributeError):
        raise ConfigError(f"expected a number, got {value!r}", where=key) from None
    if not 0 <= x <= MAX_SCALE:
        raise ConfigError(f"must be between 0 and {MAX_SCALE:g}, got {value!r}", where=key)
    return x


#: Config tables whose keys (other than the ``parallel`` ones in :data:`WORKLOAD_KEYS`) change
#: the traced graph or the layout, so ``--set`` does not take them.
GRAPH_SECTIONS = ("model", "parallel", "batch", "precision", "training")

#: Deprecated ``cluster.*`` spellings: accepted (the cluster model warns), never listed.
DEPRECATED_SET_KEYS = tuple(f"cluster.{k}" for k in DEPRECATED_KEYS)


def check_keys(overrides: Mapping[str, str], *, workload: bool) -> None:
    """A ConfigError naming the first knob of ``overrides`` that a workload config's
    simulation (``workload``) or a measured job's replay does not take, and the nearest one it
    does; or the first scale factor out of range (checked here: before a config is traced,
    which takes minutes)."""
    known = WORKLOAD_KEYS if workload else REPLAY_KEYS
    what = "a workload config" if workload else "a measured job"
    for key, value in overrides.items():
        if key not in known and key not in DEPRECATED_SET_KEYS:
            section = key.partition(".")[0]
            typo = difflib.get_close_matches(key, known, n=1, cutoff=0.8)
            if workload and section in GRAPH_SECTIONS and not typo:
                settable = [k for k in known if k.startswith(f"{section}.")]
                raise ConfigError(
                    f"{key!r} is not a simulation knob: it changes the traced graph or the layout",
                    where="--set",
                    hint="edit the config file, whose graph is then traced again, or search"
                    " layouts with echo-view plan"
                    + (
                        f"; the {section} knobs --set takes: {', '.join(settable)}"
                        if settable
                        else ""
                    ),
                )
            raise ConfigError(
                f"unknown knob {key!r} for {what}",
                where="--set",
                hint=known_keys_hint(key, known),
            )
        if key == "comm.scale" or key.startswith("compute.scale."):
            scale_value(key, value)


def unmodelled_reason(job: Job) -> str:
    """Why a comm model cannot time some of ``job``'s collectives: what its importer recorded
    (``unsized_collectives`` in a trace's metadata), else what a Kineto trace lacks."""
    said = dict.fromkeys(
        str(t.metadata["unsized_collectives"])
        for t in job.traces
        if t.metadata.get("unsized_collectives")
    )
    return "; ".join(said) or (
        "the trace gives no message size for them (Kineto: the NCCL kernel's 'In msg nelems' "
        "and 'dtype' args)"
    )


def cluster_for_job(job: Job, overrides: Mapping[str, str]) -> Cluster | None:
    """The cluster a measured job ran on: the GPU matched from the traces' device names,
    ``gpus_per_node`` from the devices a trace lists (else 8, or the world if smaller), as many
    nodes as the world needs; then ``cluster.*`` overrides. ``None`` when the GPU is unknown
    and not given."""
    cl = {k.removeprefix("cluster."): v for k, v in overrides.items() if k.startswith("cluster.")}
    devices = [d for t in job.traces for d in t.devices]
    spec = next(
        (g for d in devices if (g := match_gpu(d.name, d.total_memory_bytes)) is not None), None
    )
    world = job.world_size or max(job.ranks) + 1
    per_node = max((len(t.devices) for t in job.traces), default=0) or min(8, world)
    gpu: Any = cl.pop("gpu", None) or spec
    if gpu is None:
        if cl:
            raise ConfigError(
                "the traces do not name a GPU this version knows",
                where="--set",
                hint="add --set cluster.gpu=NAME (e.g. A100, H100)",
            )
        return None
    cluster = make_cluster(gpu, gpus_per_node=min(per_node, world))
    if "gpus_per_node" in cl:
        cluster = cluster.with_overrides({"gpus_per_node": cl.pop("gpus_per_node")})
    cl.setdefault("nodes", str(-(-world // cluster.gpus_per_node)))
    cluster = cluster.with_overrides(cl)
    _check_holds(cluster, world)
    return cluster


def _check_holds(cluster: Any, world: int) -> None:
    """A :class:`ConfigError` when ``cluster`` (after ``--set cluster.*``) has fewer GPUs than
    the job's ``world`` ranks: a config's 64 ranks ran on 1 node of 8 GPUs, no word said."""
    if cluster.nodes * cluster.gpus_per_node < world:
        raise ConfigError(
            f"{cluster.nodes:,} node(s) of {cluster.gpus_per_node:,} GPUs hold fewer GPUs "
            f"than the job's {world:,} ranks",
            where="--set cluster.nodes",
            hint="give nodes x gpus_per_node at least as many GPUs as the job has ranks",
        )


@dataclass(frozen=True, eq=False)
class ReplayRun:
    """A measured job replayed: the predicted job and the report."""

    measured: Job
    predicted: Job
    report: dict[str, Any]


def replay_job(
    job: Job,
    overrides: Mapping[str, str],
    comm: str = "measured",
    *,
    interference_file: TomlDoc | None = None,
) -> ReplayRun:
    """Rebuild ``job``'s dependency graph and simulate it with ``overrides``; ``comm`` is
    ``measured`` (collective times from the trace) or ``model`` (the NCCL model);
    ``interference_file`` is the model file ``--set interference=FILE`` names, read by the
    caller (``echo_view.loading.setting_file``)."""
    check_keys(overrides, workload=False)
    if comm not in ("measured", "model"):
        raise ConfigError(f"comm must be measured or model, got {comm!r}", where="--comm")
    scales = {
        k.removeprefix("compute.scale."): scale_value(k, v)
        for k, v in overrides.items()
        if k.startswith("compute.scale.")
    }
    comm_scale = (
        scale_value("comm.scale", overrides["comm.scale"]) if "comm.scale" in overrides else 1.0
    )
    cluster = cluster_for_job(job, overrides)
    knobs = sorted(k for k in overrides if k.startswith("cluster."))
    if comm == "measured" and knobs:  # (they were accepted, and the "what-if" was the replay)
        raise ConfigError(
            "the cluster times the modelled collectives only: a replay with --comm measured "
            "takes every collective's time from the trace",
            where=f"--set {knobs[0]}",
            hint="add --comm model",
        )
    timer: Any = None
    if comm == "model":
        if cluster is None:
            raise ConfigError(
                "--comm model needs the GPU, and the traces do not name one this version knows",
                hint="add --set cluster.gpu=NAME (e.g. A100, H100)",
            )
        timer = default_comm_model()
    workload = workload_from_job(job)
    gen = next((g for t in job.traces if (g := trace_generation(t))), 0)
    model = model_from_setting(overrides.get("interference", "on"), gen, interference_file)
    sim = simulate_replay(
        workload, job, cluster, compute=MeasuredCompute(scales), comm=timer,
        comm_scale=comm_scale, interference=model,
    )  # fmt: skip
    predicted = predicted_job(workload, sim.result, job, int(workload.meta["origin_ns"]))
    info = cast(ReplayInfo, workload.meta["replay"])
    steps = compare(job_steps(predicted), job_steps(job))
    bound = None
    if steps["step_time_s"]:
        bound = step_bound(
            workload, job, round(steps["step_time_s"] * 1e9), cluster=cluster, scales=scales,
            comm=timer, comm_scale=comm_scale, interference=model,
        ).to_json()  # fmt: skip
    report = {
        "mode": "replay" if not overrides and comm == "measured" else "what-if",
        "comm": comm,
        **steps,
        "step_bound": bound,
        "collectives": {
            "total": sim.collectives.total,
            "modelled": sim.collectives.modelled,
            "not_modelled_because": (
                unmodelled_reason(job) if timer is not None and sim.collectives.measured else None
            ),
            "measured": sim.collectives.measured,
            "matched_by": info.matched_by,
            "absent_ranks": info.absent_ranks,
        },
        "workload": {"ops": info.ops, "deps": info.deps},
        "cluster": cluster.describe() if cluster is not None else None,
        "interference": model.describe() if model is not None else None,
        "overrides": dict(overrides),
    }
    return ReplayRun(job, predicted, report)


def simulate_workload(
    cfg: WorkloadConfig,
    graph: TracedGraph,
    overrides: Mapping[str, str] | None = None,
    *,
    compute: TomlDoc | None = None,
    interference_file: TomlDoc | None = None,
    ranks: str = "stages",
) -> ConfigSimulation:
    """One simulated step of ``cfg`` with the kernel, collective and interference models its
    cluster's GPU calls for, and the ``--set`` knobs ``overrides`` (already checked);
    ``compute`` and ``interference_file`` are files the caller read (:func:`predict_workload`)."""
    overrides = overrides or {}
    cfg = with_parallel_settings(cfg, overrides)
    cluster = cluster_from_config(cfg.cluster, cfg.source).with_overrides(
        {k.removeprefix("cluster."): v for k, v in overrides.items() if k.startswith("cluster.")}
    )
    _check_holds(cluster, cfg.parallel.world_size)
    cluster.gpu.check_training_dtype(cfg.dtype, cfg.source or None)
    params = compute_params_for(cluster.gpu)
    if compute is not None:
        params = compute_params_from_doc(compute, cluster.gpu, params)
    params = params.with_overrides(
        {k.removeprefix("compute."): v for k, v in overrides.items() if k in _PARAM_KEYS},
        where="--set compute.",
    )
    scales: dict[int, float] = {}
    every = scale_value("compute.scale.all", overrides.get("compute.scale.all", "1"))
    for i, name in enumerate(OP_CLASS_NAMES[:-1]):
        key = f"compute.scale.{name}"
        scales[i] = every * (scale_value(key, overrides[key]) if key in overrides else 1.0)
    comm_scale = scale_value("comm.scale", overrides.get("comm.scale", "1"))
    interference = model_from_setting(
        overrides.get("interference", "on"), gpu_generation(cluster.gpu.name), interference_file
    )
    host = HostParams().with_overrides(
        {k.removeprefix("host."): v for k, v in overrides.items() if k in _HOST_KEYS},
        where="--set host.",
    )
    # What the config's values make impossible only once simulated (an NCCL_ALGO that leaves
    # a collective no algorithm) names the config.
    with in_file(cfg.source or None):
        return simulate_config(
            graph,
            cfg,
            cluster,
            default_comm_model(),
            params,
            comm_scale=comm_scale,
            ranks=ranks,
            scales=scales,
            interference=interference,
            host=host,
        )


@dataclass(frozen=True, eq=False)
class WorkloadRun:
    """A config's predicted step: the simulation, a predicted job (every rank when asked for,
    else the slowest simulated rank) and the report."""

    sim: ConfigSimulation
    job: Job
    report: dict[str, Any]


def predict_workload(
    cfg: WorkloadConfig,
    graph: TracedGraph,
    overrides: Mapping[str, str],
    *,
    origin: str = "graph",
    compute: TomlDoc | None = None,
    interference_file: TomlDoc | None = None,
    ranks: str = "stages",
    all_ranks_job: bool = False,
) -> WorkloadRun:
    """Simulate one step of ``cfg`` from its traced ``graph`` (found via ``origin``);
    ``compute`` holds kernel cost parameters from ``echo-view calibrate compute`` and
    ``interference_file`` the model ``--set interference=FILE`` names, both read by the caller
    (``echo_view.loading``); ``ranks`` is ``stages`` (one rank per pipeline stage) or ``all``."""
    check_keys(overrides, workload=True)
    if ranks not in ("stages", "all"):
        raise ConfigError(f"ranks must be stages or all, got {ranks!r}", where="--ranks")
    sim = simulate_workload(
        cfg, graph, overrides, compute=compute, interference_file=interference_file, ranks=ranks
    )
    cfg, cluster = sim.cfg, sim.cluster  # (with the parallel.* knobs applied)
    # The breakdown is reported for the slowest simulated rank; the whole predicted job is
    # expanded only when asked for (it is written out).
    ends = sim.rank_end_ns()
    slowest = max(ends, key=lambda r: (ends[r], -r))
    job = predicted_config_job(sim, ranks=None if all_ranks_job else [slowest])
    report = _workload_report(sim, job, origin, cluster.describe(), overrides, ranks, slowest)
    peak = cluster.gpu.peak(cfg.dtype)
    report["throughput"] = throughput(cfg, sim.step_ns / 1e9, peak).to_json()
    report["memory"] = memory_report(cfg, cluster.gpu.memory_bytes).to_json()
    if cfg.model.moe is not None:
        report["moe"] = moe_report(cfg)
    return WorkloadRun(sim, job, report)


def _workload_report(
    sim: ConfigSimulation,
    job: Job,
    origin: str,
    cluster: Any,
    overrides: Mapping[str, str],
    mode: str,
    slowest: int,
) -> dict[str, Any]:
    cfg = sim.cfg
    step_s = sim.step_ns / 1e9
    trace = job.trace(slowest)
    one = Job((trace,), ClockAlignment("simulated", (0,), 0), job.world_size, job.source, True)
    rows = summarize(one).to_json()["ranks"]
    slow = max(rows, key=lambda r: r["step_ns"] or 0) if rows else None
    breakdown = None
    if slow is not None and slow["compute_ns"] is not None:
        breakdown = {
            "rank": slow["rank"],
            "compute_s": slow["compute_ns"] / 1e9,
            "comm_s": slow["comm_ns"] / 1e9,
            "exposed_comm_s": slow["exposed_comm_ns"] / 1e9,
            "idle_s": slow["idle_ns"] / 1e9,
        }
    host_ns = sim.host_ns(slowest)
    out: dict[str, Any] = {
        "step_time_s": step_s,
        "ranks_total": cfg.parallel.world_size,
        "ranks_simulated": len(sim.composed.simulated_ranks),
        "ranks_mode": mode,
        "stages": [{"stage": s, "step_time_s": t / 1e9} for s, t in sorted(sim.stage_ns().items())],
        "breakdown": breakdown,
        # How much of the slowest rank's step its host thread spends issuing work.
        "host": {
            "kernel_us": sim.host.kernel_us,
            "fill_us": sim.host.fill_us,
            "fills": sim.fills(slowest),
            "busy_s": host_ns / 1e9,
            "share": host_ns / sim.step_ns if sim.step_ns else 0.0,
        },
        "bubble": sim.bubble(),
        "graph": {"origin": origin, "roles": len(sim.graph.roles), "ops": sim.graph.op_count()},
        "cluster": cluster,
        "overrides": dict(overrides),
    }
    if cfg.reference is not None:
        ref = cfg.reference.step_time_s
        out["reference"] = {"step_time_s": ref, "source": cfg.reference.source}
        out["reference_error_pct"] = 100.0 * (step_s - ref) / ref
    return out
