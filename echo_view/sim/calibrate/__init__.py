"""Calibration: model parameters fitted to measurements, and the minimisers they share.

:mod:`.compute` fits the kernel cost model to the kernels of real traces (``calibrate
compute``), :mod:`.comm` the collective models to nccl-tests logs (``calibrate comm``),
:mod:`.steps` the per-generation GEMM efficiency to published step times with leave-one-source-out
validation (``bench/step_accuracy.py``); :mod:`.optimize` holds the minimisers. The interference
model's fit lives with the model (:mod:`echo_view.sim.interference.fit`).
"""
