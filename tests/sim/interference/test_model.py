"""The interference model in the simulator: published defaults, model files, replay with the
measured slowdown removed, what-ifs that move communication, and workload configs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from echo_view.errors import ConfigError
from echo_view.loading import build_registry
from echo_view.model import Job, LaneKind
from echo_view.model.gpus import GENERATIONS
from echo_view.model.toml_file import read_toml_doc
from echo_view.model.workload import OP_CLASS_NAMES, Workload
from echo_view.sim import simulate, step_spans
from echo_view.sim.interference import (
    DEFAULT_FACTORS,
    InterferenceModel,
    config_slowdowns,
    default_model,
    interference_ops,
    model_from_doc,
    model_from_setting,
    model_to_toml,
    replay_slowdowns,
)
from echo_view.sim.interference.fit import CLASSES, InterferenceFit
from echo_view.sim.interference.model import op_devices
from echo_view.sim.interference.simulate import simulate_replay
from echo_view.sim.replay import workload_from_job
from tests.conftest import SAMPLES, shared_path


@pytest.fixture(scope="module")
def dlrm() -> tuple[Job, Workload]:
    path = SAMPLES / "dlrm_kineto"
    job = build_registry().importer_for(path).read([path])
    return job, workload_from_job(job)


def test_defaults_are_the_published_factors() -> None:
    m = default_model("ampere")
    assert m.fit.class_factors() == pytest.approx(DEFAULT_FACTORS["ampere"])
    assert m.fit.class_factors()["gemm"] == pytest.approx(1.269)
    hopper = default_model("hopper").fit.class_factors()
    assert list(hopper.values()) == pytest.approx([1.189] * len(CLASSES))
    for gen in range(len(GENERATIONS)):
        assert default_model(gen).fit.kind == "constant"
    with pytest.raises(ConfigError):
        default_model("pascal")


def test_model_file_round_trip(tmp_path: Path) -> None:
    coef = np.array([1 / 1.3] + [1.0] * (len(CLASSES) - 1))
    model = InterferenceModel(
        InterferenceFit("constant", coef, {"gemm": 12}),
        'calibrated on "x"',
        {"job": {"none": {"samples": 12, "weighted_abs": 0.2}}},
    )
    path = tmp_path / "m.toml"
    path.write_text(model_to_toml(model))
    back = model_from_doc(read_toml_doc(path))
    assert np.allclose(back.fit.coef, coef) and back.source == 'calibrated on "x"'
    assert back.evaluation["job"]["none"]["weighted_abs"] == 0.2
    assert model_from_setting(str(path), 0, read_toml_doc(path)) is not None
    assert model_from_setting("off", 3) is None
    on = model_from_setting("on", GENERATIONS.index("hopper"))
    assert on is not None and on.source.startswith("published (hopper)")
    with pytest.raises(ConfigError):
        model_from_setting("sometimes", 0)
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "constant"\n[coef]\n"class.nope" = 1.0\n')
    with pytest.raises(ConfigError):
        model_from_doc(read_toml_doc(bad))


def test_fitted_model_file_keeps_its_settings(tmp_path: Path) -> None:
    from echo_view.sim.interference.fit import feature_names

    names = feature_names("fitted")
    fit = InterferenceFit(
        "fitted",
        np.linspace(0.1, 0.5, len(names)),
        {"gemm": 3},
        shrink=0.75,
        generations=(GENERATIONS.index("volta"), GENERATIONS.index("ampere")),
        solo_scale_ns=10_000,
    )
    path = tmp_path / "fitted.toml"
    path.write_text(model_to_toml(InterferenceModel(fit, "test", {})))
    back = model_from_doc(read_toml_doc(path)).fit
    assert back.kind == "fitted" and np.allclose(back.coef, fit.coef)
    assert back.shrink == 0.75 and back.generations == fit.generations
    assert back.solo_scale_ns == 10_000
    # A scale outside 1 ns .. 1,000 s is refused (1e-300 made the weights overflow).
    text = path.read_text()
    for bad in ("1e-300", "0.5", "1e13", "0"):
        path.write_text(text.replace("solo_scale_ns = 10000", f"solo_scale_ns = {bad}"))
        with pytest.raises(ConfigError, match="solo_scale_ns"):
            model_from_doc(read_toml_doc(path))
    # A sample count that is no count (inf raised OverflowError: found by fuzzing).
    assert "gemm = 3" in text
    for bad in ("inf", "-1", "2.5", "1e300", '"x"'):
        path.write_text(text.replace("gemm = 3", f"gemm = {bad}"))
        with pytest.raises(ConfigError, match=r"samples\.gemm"):
            model_from_doc(read_toml_doc(path))


def test_replay_removes_the_measured_slowdown(dlrm: tuple[Job, Workload]) -> None:
    job, wl = dlrm
    model = default_model("volta")
    rs = replay_slowdowns(wl, job, model)
    _, comm, compute = interference_ops(wl)
    assert comm.sum() == 64 and compute.any()
    over = rs.overlap_ns > 0
    assert over.any() and not (over & ~compute).any()
    dur = wl.ops.dur_ns
    # Solo = alone part + overlapped part / s, to the ns; untouched where nothing overlapped.
    expect = np.rint((dur - rs.overlap_ns) + rs.overlap_ns / rs.slowdown).astype(np.int64)
    assert np.array_equal(rs.solo_ns[compute], expect[compute])
    assert np.array_equal(rs.solo_ns[~over], dur[~over])
    assert (rs.solo_ns[over] < dur[over]).all()
    # Slowdowns are the published Ampere-derived class factors (no Volta figure).
    classes = wl.ops.op_class[compute].tolist()
    slows = rs.slowdown[compute].tolist()
    for c, s in zip(classes, slows, strict=True):
        assert s == pytest.approx(DEFAULT_FACTORS["volta"][OP_CLASS_NAMES[c]])


def test_replay_with_interference_reproduces_replay(dlrm: tuple[Job, Workload]) -> None:
    """Removing the measured slowdown and letting the engine re-apply it gives back the
    replay's step times (the overlaps are the same)."""
    job, wl = dlrm
    off = simulate(wl).result
    on = simulate_replay(wl, job, interference=default_model("volta")).result
    s_off = step_spans(wl, off.start_ns, off.end_ns)
    s_on = step_spans(wl, on.start_ns, on.end_ns)
    assert s_off.keys() == s_on.keys()
    for k, v in s_off.items():
        assert abs(s_on[k] - v) <= max(2_000, v // 10_000)
    assert simulate_replay(wl, job, interference=None).result.identical(off)


def test_faster_network_removes_the_slowdown() -> None:
    """A V100 job whose GPU work bounds the step: with a 4x faster network the overlap
    shrinks, and with interference on the step gets shorter than with the measured, slowed
    durations kept (interference off)."""
    path = shared_path("data", "hta-tests", "trace_diff", "test", "test.json.gz")
    job = build_registry().importer_for(path).read([path])
    wl = workload_from_job(job)
    model = default_model("volta")

    def mean_step(scale: float, with_model: bool) -> float:
        sim = simulate_replay(wl, job, comm_scale=scale, interference=model if with_model else None)
        spans = step_spans(wl, sim.result.start_ns, sim.result.end_ns)
        return sum(spans.values()) / len(spans)

    same_off, same_on = mean_step(1.0, False), mean_step(1.0, True)
    assert abs(same_on - same_off) <= same_off * 1e-4
    fast_off, fast_on = mean_step(0.25, False), mean_step(0.25, True)
    assert fast_on < fast_off * 0.98


def test_config_interference() -> None:
    from echo_view.loading import load_workload
    from echo_view.sim.cluster import cluster_from_config
    from echo_view.sim.comm.defaults import default_comm_model
    from echo_view.sim.compute_presets import compute_params_for
    from echo_view.sim.config_sim import simulate_config

    cfg, graph, _, _ = load_workload(SAMPLES / "configs" / "echo-gpt13b-64xH800.toml")
    cluster = cluster_from_config(cfg.cluster)
    params = compute_params_for(cluster.gpu)
    comm = default_comm_model()
    model = default_model("hopper")

    def run(scale: float, m: InterferenceModel | None) -> int:
        sim = simulate_config(graph, cfg, cluster, comm, params, comm_scale=scale, interference=m)
        return sim.step_ns

    # More time with interference; none without communication to overlap.
    assert run(1.0, model) >= run(1.0, None)
    assert run(0.0, model) == run(0.0, None)
    # A coarse pass's slowdown is the duration-weighted mean over its kernels (1.189 each on
    # Hopper), its collectives counted at 1.
    sim = simulate_config(graph, cfg, cluster, comm, params)
    comp = sim.composed
    slow = config_slowdowns(comp, model, cluster.gpu.name)
    i = int(np.flatnonzero(comp.src_table >= 0)[0])
    t = comp.tables[int(comp.src_table[i])]
    lo, hi = int(comp.src_lo[i]), int(comp.src_hi[i])
    d = t.dur_ns[lo:hi].astype(float)
    f = np.where(t.coll[lo:hi], 1.0, 1.189)
    assert slow[i] == pytest.approx((d * f).sum() / d.sum())


def test_op_devices_tell_every_rank_and_gpu_apart(dlrm: tuple[Job, Workload]) -> None:
    _, wl = dlrm
    gpu = [lane.kind == LaneKind.GPU_STREAM for lane in wl.lanes]
    # Rank 0's GPU numbered 2^20 + 1: packed as rank * 2^20 + device + 1 it once took the id
    # of rank 1's GPU 1.
    odd = tuple(
        dataclasses.replace(lane, device=(1 << 20) + 1) if g and r == 0 else lane
        for lane, g, r in zip(wl.lanes, gpu, wl.lane_rank.tolist(), strict=True)
    )
    for w in (wl, dataclasses.replace(wl, lanes=odd)):
        dev = op_devices(w)
        on_gpu = dev >= 0
        pairs = {(int(r), int(d)) for r, d in zip(w.ops.rank[on_gpu], dev[on_gpu], strict=True)}
        assert len(pairs) == len({d for _, d in pairs}) == 8  # one id per rank's GPU


def test_measured_overlap_stays_on_each_gpu_whatever_the_clocks(
    dlrm: tuple[Job, Workload],
) -> None:
    # Rank 1's clock 2^46 ns (19.5 hours) behind rank 0's, as captures of separate runs are: a
    # fixed stride of 2^46 ns per GPU once laid its work onto rank 0's communication.
    job, wl = dlrm
    model = default_model("volta")
    base = replay_slowdowns(wl, job, model).overlap_ns
    assert wl.measured_start_ns is not None and wl.measured_end_ns is not None
    back = np.where(wl.ops.rank == 1, 1 << 46, 0)
    for shift in (back, -back, np.where(wl.ops.rank == 1, 1 << 61, 0)):
        moved = dataclasses.replace(
            wl,
            measured_start_ns=np.asarray(wl.measured_start_ns) - shift,
            measured_end_ns=np.asarray(wl.measured_end_ns) - shift,
        )
        assert replay_slowdowns(moved, job, model).overlap_ns.tolist() == base.tolist()


def test_measured_overlap_by_hand_and_past_int64_spans() -> None:
    from echo_view.sim.interference.model import _measured_overlap

    rng = np.random.default_rng(3)
    n = 400
    dev = rng.integers(0, 5, n).astype(np.int64)
    start = rng.integers(0, 10_000, n).astype(np.int64)
    end = start + rng.integers(0, 500, n)
    is_comm = rng.random(n) < 0.3

    def by_hand(s: npt.NDArray[np.int64], e: npt.NDArray[np.int64]) -> list[int]:
        out = []
        for k in np.flatnonzero(~is_comm).tolist():
            covered: set[int] = set()
            for c in np.flatnonzero(is_comm & (dev == dev[k])).tolist():
                covered.update(range(max(s[c], s[k]), min(e[c], e[k])))
            out.append(len(covered))
        return out

    c_ops, k_ops = np.flatnonzero(is_comm), np.flatnonzero(~is_comm)
    want = by_hand(start, end)
    assert _measured_overlap(dev, start, end, c_ops, k_ops).tolist() == want
    # GPU 2's clock 2^62 - 2^20 ns away: the GPUs' spans add up past 2^62 (GPU by GPU then).
    far = np.where(dev == 2, (1 << 62) - (1 << 20), 0)
    # One op of GPU 3 and one of GPU 4 starting 2^61 ns early: their spans add up past 2^62.
    firsts = [int(np.flatnonzero(dev == g)[0]) for g in (3, 4)]
    wide = np.where(np.isin(np.arange(n), firsts), -(1 << 61), 0)
    for s_, e_ in ((start + far, end + far), (start - far, end - far), (start + wide, end)):
        assert _measured_overlap(dev, s_, e_, c_ops, k_ops).tolist() == by_hand(s_, e_)


def test_a_file_that_is_no_model_says_which_key_it_lacks(tmp_path: Path) -> None:
    # The message was "not an interference model: 'kind'" (a KeyError's text).
    path = tmp_path / "m.toml"
    path.write_text('source = "x"\n')
    with pytest.raises(ConfigError, match="not an interference model: no key 'kind'"):
        model_from_doc(read_toml_doc(path))
