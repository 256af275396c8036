"""Helpers for the TUI tests: a small seeded synthetic job (exact, hand-checkable) and a runner
that drives the app headless."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from textual.pilot import Pilot

from echo_view.model import (
    ClockAlignment,
    CollectiveKind,
    EventKind,
    Job,
    LaneKind,
    Trace,
    TraceBuilder,
)
from echo_view.tui.app import EchoViewApp

ROOT = Path(__file__).resolve().parents[2]
DLRM = ROOT / "samples" / "dlrm_kineto"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)"
US = 1_000


def synth_rank(rank: int, steps: int = 2, seed: int = 0, scale: float = 1.0) -> Trace:
    """One rank: per step a ProfilerStep, forward ops launching GEMMs on stream 7, an all-reduce
    on stream 13 (group "dp", seq = step), and a copy. ``scale`` stretches the GPU kernels."""
    rng = random.Random(seed * 1000 + rank)
    b = TraceBuilder(rank, source=f"synth-rank{rank}")
    cpu = b.lane(LaneKind.CPU_THREAD, 100 + rank, 100 + rank, "thread main")
    s7 = b.gpu_stream(rank, 7)
    s13 = b.gpu_stream(rank, 13)
    dp = b.group("dp", (0, 1))
    corr = 1
    for step in range(steps):
        t0 = step * 1000 * US
        b.event(EventKind.USER_ANNOTATION, f"ProfilerStep#{step}", t0, 900 * US, cpu)
        b.step(step, t0, t0 + 900 * US)
        t = t0 + 10 * US
        gpu_t = t0 + 20 * US
        for i in range(6):
            op = b.event(EventKind.CPU_OP, f"aten::linear_{i}", t, 60 * US, cpu)
            b.event(
                EventKind.RUNTIME, "cudaLaunchKernel", t + 10 * US, 8 * US, cpu, correlation=corr
            )
            dur = int((50 + rng.randrange(40)) * US * scale)
            k = b.event(EventKind.KERNEL, GEMM, gpu_t, dur, s7, correlation=corr)
            b.flow(op + 1, k, corr)
            gpu_t += dur + 5 * US
            t += 70 * US
            corr += 1
        b.event(EventKind.RUNTIME, "cudaLaunchKernel", t, 8 * US, cpu, correlation=corr)
        dur = int(200 * US * scale)
        k = b.event(EventKind.KERNEL, NCCL, gpu_t, dur, s13, correlation=corr)
        b.collective(k, CollectiveKind.ALL_REDUCE, nbytes=4 << 20, dtype="f32", group=dp, seq=step)
        corr += 1
        b.event(EventKind.RUNTIME, "cudaMemcpyAsync", t + 20 * US, 6 * US, cpu, correlation=corr)
        b.event(EventKind.MEMCPY, "Memcpy DtoH (Device -> Pinned)", gpu_t + dur + 10 * US,
                20 * US, s7, correlation=corr)  # fmt: skip
        corr += 1
    return b.build()


def synth_job(steps: int = 2, scale: float = 1.0, predicted: bool = False) -> Job:
    """Two ranks of :func:`synth_rank` on one clock."""
    traces = (synth_rank(0, steps, scale=scale), synth_rank(1, steps, scale=scale))
    label = "predicted" if predicted else "measured"
    return Job(
        traces, ClockAlignment("shared-host-clock", (0, 0), 0), 2, f"synth-{label}", predicted
    )


async def wait_loaded(pilot: Pilot[None]) -> None:
    """Wait until the loading worker has handed over and the first frame is laid out."""
    app = pilot.app
    assert isinstance(app, EchoViewApp)
    for _ in range(400):
        if app.loaded is not None or app.error is not None:
            break
        await pilot.pause(0.02)
    await pilot.pause()
    await pilot.pause()


def run_app(
    inputs: Sequence[Job | Path],
    body: Callable[[EchoViewApp, Pilot[None]], Awaitable[None]],
    size: tuple[int, int] = (80, 24),
    loader: object = None,
) -> EchoViewApp:
    """Run the app headless at ``size``, wait for loading, then ``body(app, pilot)``."""
    app = EchoViewApp(list(inputs), loader=loader)  # type: ignore[arg-type]

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_loaded(pilot)
            await body(app, pilot)

    asyncio.run(main())
    return app
