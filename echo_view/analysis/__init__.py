"""Analysis of measured and predicted traces: steps, interval arithmetic, time breakdowns and
whole-job summaries. Reads the model only; knows no file format."""

from echo_view.analysis.breakdown import (
    Categories,
    GpuWork,
    StepBreakdown,
    breakdown,
    categorize,
    gpu_work,
)
from echo_view.analysis.intervals import clip, measure, pattern_measure, union
from echo_view.analysis.steps import StepDetection, find_steps, launch_start_ns, steps_of

__all__ = [
    "Categories",
    "GpuWork",
    "StepBreakdown",
    "StepDetection",
    "breakdown",
    "categorize",
    "clip",
    "find_steps",
    "gpu_work",
    "launch_start_ns",
    "measure",
    "pattern_measure",
    "steps_of",
    "union",
]
