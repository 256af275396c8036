"""The Python API: what the command line does, as objects and pandas DataFrames.

``import echo_view as ev`` gives :func:`load`, :func:`summary`, :func:`simulate`, :func:`diff`
(loaded on first use, so ``import echo_view`` stays cheap). DataFrames need the ``analysis``
extra (pandas); everything else needs only the core. See docs/api.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from echo_view.analysis.diff import DEFAULT_TOLERANCE_PCT, JobDiff, diff_jobs
from echo_view.analysis.summary import summarize
from echo_view.api import frames
from echo_view.errors import UsageError
from echo_view.formats import Registry
from echo_view.loading import is_workload_input, load_workload, read_job, setting_file
from echo_view.model import Job as ModelJob
from echo_view.model.toml_file import read_toml_doc
from echo_view.sim.runs import predict_workload, replay_job

PathLike = str | os.PathLike[str]
DataFrame = frames.DataFrame


@dataclass(frozen=True, eq=False)
class Job:
    """A loaded job (measured or predicted): its ranks as DataFrames. :attr:`model` is the
    columnar :class:`echo_view.model.Job` the rest of echo-view works on."""

    model: ModelJob

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks present, ascending."""
        return self.model.ranks

    @property
    def source(self) -> str:
        """Where the job came from (paths as given)."""
        return self.model.source

    @property
    def predicted(self) -> bool:
        """True for a simulator's prediction."""
        return self.model.predicted

    def events(self) -> DataFrame:
        """Every event of every rank (columns: :mod:`echo_view.api.frames`)."""
        return frames.events_frame(self.model)

    def kernels(self) -> DataFrame:
        """GPU kernels, memcpy and memset, with HTA's ``kernel_type``."""
        return frames.kernels_frame(self.model)

    def collectives(self) -> DataFrame:
        """One row per collective: kind, bytes, group, GPU time."""
        return frames.collectives_frame(self.model)

    def to_hta(self, *, round_to_us: bool = True, include_last_profiler_step: bool = False) -> Any:
        """This job as HolisticTraceAnalysis' ``TraceAnalysis`` (needs the ``hta`` extra):
        ``job.to_hta().get_temporal_breakdown(visualize=False)``; see
        :mod:`echo_view.api.hta`."""
        from echo_view.api.hta import analysis

        return analysis(
            self.model,
            round_to_us=round_to_us,
            include_last_profiler_step=include_last_profiler_step,
        )


def _paths(paths: PathLike | Sequence[PathLike]) -> list[Path]:
    """``paths`` as a list; a UsageError for what names no file (``""`` would be the current
    directory, a ``bytes`` or ``None`` a TypeError deep inside)."""
    items = [paths] if isinstance(paths, str | os.PathLike) else paths
    if not isinstance(items, Sequence) or isinstance(items, bytes):
        raise UsageError(f"expected a path or a list of paths, got {type(paths).__name__}")
    for item in items:
        if not _is_name(item):
            raise UsageError(f"not a file or directory name: {item!r}")
    return [Path(p) for p in items]


def _is_name(item: object) -> bool:
    """Whether ``item`` is a non-empty path given as text (a ``bytes`` path, or a path-like
    object whose ``__fspath__`` gives bytes, is not one ``Path`` takes)."""
    if not isinstance(item, str | os.PathLike):
        return False
    name = os.fspath(item)
    return isinstance(name, str) and bool(name)


def load(paths: PathLike | Sequence[PathLike], *, registry: Registry | None = None) -> Job:
    """Read a job: a trace file (Kineto ``.json``/``.json.gz``, Nsight ``.sqlite``,
    ``.sqlite.gz``, ``.nsys-rep``), several files of one job, or a directory of rank files —
    the paths ``echo-view info`` takes. Workload configs and traced graphs are predicted, not
    loaded: pass them to :func:`simulate`."""
    if registry is not None and not isinstance(registry, Registry):
        raise UsageError(
            f"registry must be a Registry, got {type(registry).__name__}",
            hint="leave it out, or pass echo_view.loading.build_registry() with your importers",
        )
    given = _paths(paths)
    if len(given) == 1 and is_workload_input(given[0]):
        raise UsageError(
            "a workload config or traced graph holds no timeline to load",
            path=given[0],
            hint="predict it with echo_view.simulate(path)",
        )
    return Job(read_job(given, registry))


def _model(job: Job | ModelJob) -> ModelJob:
    return job.model if isinstance(job, Job) else job


def summary(job: Job | ModelJob | PathLike, per: str = "step") -> DataFrame:
    """``echo-view info``'s breakdown (:mod:`echo_view.analysis.breakdown`) of a job (or of
    the job at a path, as :func:`diff` takes): with ``per="step"`` one row per (rank, device,
    step) with the step window and its compute, comm, exposed_comm, memory and idle ns; with
    ``per="rank"`` info's per-rank table (means per step, whole ns)."""
    result = summarize(_model(job) if isinstance(job, Job | ModelJob) else load(job).model)
    if per == "rank":
        rows = result.to_json()["ranks"]
        return frames.records_frame(
            [{k: v for k, v in r.items() if k not in ("per_step", "total")} for r in rows]
        )
    if per != "step":
        raise UsageError(f"per must be 'step' or 'rank', got {per!r}")
    return frames.summary_frame(result)


@dataclass(frozen=True, eq=False)
class Diff:
    """``echo-view diff A B``: the comparison and its tables as DataFrames."""

    result: JobDiff
    tables: dict[str, DataFrame] = field(repr=False)

    @property
    def ranks(self) -> DataFrame:
        """Step time per aligned rank: ``a_ns``, ``b_ns``, ``delta_ns``, percentages."""
        return self.tables["ranks"]

    @property
    def categories(self) -> DataFrame:
        """Per category (compute, comm, exposed_comm, memory, idle), mean over ranks."""
        return self.tables["categories"]

    @property
    def kernels(self) -> DataFrame:
        """Kernel classes by |delta| (per step, summed over the aligned ranks)."""
        return self.tables["kernels"]

    @property
    def collectives(self) -> DataFrame:
        """Collective classes by |delta|."""
        return self.tables["collectives"]

    @property
    def error_pct(self) -> float | None:
        """Step-time error in percent of the reference (what ``--fail-above`` checks)."""
        return self.result.error_pct

    @property
    def verdict(self) -> str:
        """The one-sentence verdict ``echo-view diff`` prints."""
        return self.result.verdict[1]

    def to_json(self) -> dict[str, Any]:
        """The ``diff --json`` object."""
        return self.result.to_json()


def diff(
    a: Job | ModelJob | PathLike,
    b: Job | ModelJob | PathLike,
    *,
    top: int = 10,
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
) -> Diff:
    """Compare job ``a`` with job ``b`` (jobs or paths), as ``echo-view diff A B``."""
    ja = _model(a) if isinstance(a, Job | ModelJob) else load(a).model
    jb = _model(b) if isinstance(b, Job | ModelJob) else load(b).model
    result = diff_jobs(ja, jb, top=top, tolerance_pct=tolerance_pct)
    return Diff(result, frames.diff_frames(result))


@dataclass(frozen=True, eq=False)
class SimResult:
    """A simulation: the ``simulate --json`` report (without ``input`` and ``seconds``) and
    the predicted job (a replay: every rank; a config: its slowest simulated rank)."""

    report: dict[str, Any]
    job: Job
    measured: Job | None = None

    @property
    def step_time_s(self) -> float | None:
        """The predicted step time in seconds."""
        value = self.report.get("step_time_s")
        return None if value is None else float(value)

    @property
    def measured_step_time_s(self) -> float | None:
        """A replay's measured step time (``None`` for a config without a reference)."""
        value = self.report.get("measured_step_time_s")
        if value is None and "reference" in self.report:
            value = self.report["reference"]["step_time_s"]
        return None if value is None else float(value)

    def frame(self) -> DataFrame:
        """Per rank for a replay (predicted and measured step, breakdown in s); per pipeline
        stage for a config (``stage``, ``step_time_s``)."""
        return frames.records_frame(self.report.get("ranks") or self.report["stages"])


def simulate(
    job_or_path: Job | ModelJob | PathLike | Sequence[PathLike],
    overrides: Mapping[str, object] | None = None,
    *,
    comm: str = "measured",
    compute: PathLike | None = None,
    ranks: str = "stages",
) -> SimResult:
    """``echo-view simulate``: replay a measured job (a :class:`Job` or trace paths), or
    predict a workload config (``.toml``) or traced graph. ``overrides`` are the ``--set``
    knobs (``{"compute.scale.gemm": 0.5}``, :mod:`echo_view.sim.runs`); ``comm`` is
    ``measured`` or ``model`` (replays); ``compute`` and ``ranks`` apply to configs."""
    if overrides is not None and not isinstance(overrides, Mapping):
        raise UsageError(
            f"overrides must be a mapping of knob to value, got {type(overrides).__name__}",
            hint='e.g. {"compute.scale.gemm": 0.5}',
        )
    if compute is not None and not _is_name(compute):
        raise UsageError(f"compute must name a calibration file, got {compute!r}")
    if comm not in ("measured", "model"):
        raise UsageError(f"comm must be 'measured' or 'model', got {comm!r}")
    knobs = {str(k): str(v) for k, v in (overrides or {}).items()}
    job = job_or_path
    if not isinstance(job, Job | ModelJob):
        given = _paths(job)
        if len(given) == 1 and is_workload_input(given[0]):
            if comm != "measured":  # (it was ignored)
                raise UsageError(
                    "comm applies to a measured job's replay: a workload config's collectives "
                    "always come from the NCCL model",
                    hint="leave comm out; comm.scale or the cluster.* overrides change them",
                )
            cfg, graph, origin, _ = load_workload(given[0])
            run = predict_workload(
                cfg,
                graph,
                knobs,
                origin=origin,
                compute=None if compute is None else read_toml_doc(Path(compute)),
                interference_file=setting_file(knobs.get("interference")),
                ranks=ranks,
            )
            return SimResult(run.report, Job(run.job))
        job = load(given)
    if compute is not None or ranks != "stages":
        raise UsageError(
            "compute and ranks apply to workload configs and traced graphs, not to a measured job",
            hint="a replay takes its kernel times from the trace; use compute.scale.* overrides",
        )
    interference = setting_file(knobs.get("interference"))
    replay = replay_job(_model(job), knobs, comm, interference_file=interference)
    return SimResult(replay.report, Job(replay.predicted), Job(replay.measured))


__all__ = ["Diff", "Job", "SimResult", "diff", "load", "simulate", "summary"]
