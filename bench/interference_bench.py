"""Simulation with interference on against the same simulation with it off.

Cases (each run ``--repeat`` times, alternating on and off; medians and the on/off ratio):

- **replay** of the 8-rank DLRM job in ``samples/dlrm_kineto`` (and, when ``../shared`` is
  present, of the HTA ``trace_diff/test`` trace, a V100 job with 2,700 overlapped kernels):
  off is :func:`echo_view.sim.simulate` on the reconstructed workload; on is
  :func:`echo_view.sim.interference.simulate.simulate_replay` with the published defaults for the
  job's GPU, which includes removing the measured slowdown from every overlapped kernel.
- **config**: ``samples/configs/gpt175b-1024xH100.toml`` through
  :func:`echo_view.sim.config_sim.simulate_config`, with and without the interference model
  (composition included in both). Also ``--config PATH`` for another one.

For the config also the engine alone (composition done once; on includes the per-op slowdowns
and the rate hook). Times are CPU time of this process (``time.process_time``): the machine
may be shared, and wall time then measures the neighbours. Also prints the step time each way
(as ``echo-view simulate`` reports it), and for a 4x faster network (``comm.scale=0.25``), so
the effect is visible next to its cost.

    python bench/interference_bench.py [--repeat 7] [--config PATH]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from echo_view.loading import build_registry, load_workload  # noqa: E402
from echo_view.model.gpus import gpu_generation  # noqa: E402
from echo_view.sim import engine, predicted_job, simulate  # noqa: E402
from echo_view.sim.cluster import cluster_from_config  # noqa: E402
from echo_view.sim.comm.defaults import default_comm_model  # noqa: E402
from echo_view.sim.compute_presets import compute_params_for  # noqa: E402
from echo_view.sim.config_sim import simulate_config  # noqa: E402
from echo_view.sim.interference import default_model  # noqa: E402
from echo_view.sim.interference.features import trace_generation  # noqa: E402
from echo_view.sim.interference.simulate import config_rate_hook, simulate_replay  # noqa: E402
from echo_view.sim.replay import workload_from_job  # noqa: E402
from echo_view.sim.report import compare, job_steps  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    out = None
    times = []
    for _ in range(repeat):
        gc.collect()
        t0 = time.process_time()
        out = fn()
        times.append(time.process_time() - t0)
    return statistics.median(times), out


def pair(off: Callable[[], Any], on: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """Medians of ``off`` and ``on``, run alternately so load changes hit both alike."""
    t_off: list[float] = []
    t_on: list[float] = []
    for _ in range(repeat):
        t_off.append(timed(off, 1)[0])
        t_on.append(timed(on, 1)[0])
    return statistics.median(t_off), statistics.median(t_on)


def replay_case(path: Path, repeat: int) -> None:
    job = build_registry().importer_for(path).read([path])
    wl = workload_from_job(job)
    model = default_model(trace_generation(job.traces[0]))
    off, on = pair(lambda: simulate(wl), lambda: simulate_replay(wl, job, interference=model),
                   repeat)  # fmt: skip

    def step(scale: float, with_model: bool) -> float:
        """The job step time (ms) as ``echo-view simulate`` reports it."""
        sim = simulate_replay(wl, job, comm_scale=scale, interference=model if with_model else None)
        predicted = predicted_job(wl, sim.result, job, int(wl.meta["origin_ns"]))
        return float(compare(job_steps(predicted), job_steps(job))["step_time_s"]) * 1e3

    print(f"replay {path.name}: {len(wl)} ops")
    print(f"  median off {off * 1e3:.1f} ms, on {on * 1e3:.1f} ms, ratio {on / off:.2f}x")
    print(
        f"  step time: off {step(1.0, False):.3f} ms, on {step(1.0, True):.3f} ms; "
        f"comm.scale=0.25: off {step(0.25, False):.3f} ms, on {step(0.25, True):.3f} ms"
    )


def config_case(path: Path, repeat: int) -> None:
    cfg, graph, _origin, _ = load_workload(path)
    cluster = cluster_from_config(cfg.cluster)
    params = compute_params_for(cluster.gpu)
    comm = default_comm_model()
    model = default_model(gpu_generation(cluster.gpu.name))

    def run(with_model: bool, scale: float = 1.0) -> Any:
        return simulate_config(
            graph, cfg, cluster, comm, params, comm_scale=scale,
            interference=model if with_model else None,
        )  # fmt: skip

    off, on = pair(lambda: run(False), lambda: run(True), repeat)
    composed = run(False).composed
    wl = composed.workload
    e_off, e_on = pair(
        lambda: engine.run(wl, composed.dur_ns, composed.coll_dur_ns),
        lambda: engine.run(
            wl,
            composed.dur_ns,
            composed.coll_dur_ns,
            rates=config_rate_hook(composed, model, cluster.gpu.name),
        ),
        repeat,
    )
    print(f"config {path.name}: {len(wl)} ops")
    print(f"  median off {off * 1e3:.1f} ms, on {on * 1e3:.1f} ms, ratio {on / off:.2f}x")
    print(
        f"  engine alone: median off {e_off * 1e3:.1f} ms, on {e_on * 1e3:.1f} ms, "
        f"ratio {e_on / e_off:.2f}x"
    )
    print(
        f"  step: off {run(False).step_ns / 1e9:.4f} s, on {run(True).step_ns / 1e9:.4f} s; "
        f"comm.scale=0.25: off {run(False, 0.25).step_ns / 1e9:.4f} s, "
        f"on {run(True, 0.25).step_ns / 1e9:.4f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--config", type=Path, default=ROOT / "samples/configs/gpt175b-1024xH100.toml")
    args = ap.parse_args()
    replay_case(ROOT / "samples" / "dlrm_kineto", args.repeat)
    test = SHARED / "hta-tests" / "trace_diff" / "test" / "test.json.gz"
    if test.exists():
        replay_case(test, args.repeat)
    config_case(args.config, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
