"""Interference: compute kernels slowed by communication running beside them on one GPU.

Measured from traces (:mod:`.measure`, kernel launch and shape :mod:`.features`), fitted into
models (:mod:`.fit`, held-out :mod:`.evaluate`, the rate rule on measured kernels
:mod:`.measured_rates`), and applied by the simulator (:mod:`.model`: which model and which ops;
:mod:`.rates`: the engine's rate hook; :mod:`.simulate`: replays and configs with it). See
docs/interference.md.
"""

from echo_view.sim.interference.model import (
    DEFAULT_FACTORS,
    PUBLISHED,
    InterferenceModel,
    config_slowdowns,
    default_model,
    gemm_slowdown_of,
    interference_ops,
    model_from_doc,
    model_from_setting,
    model_to_toml,
    replay_slowdowns,
)

__all__ = [
    "DEFAULT_FACTORS",
    "PUBLISHED",
    "InterferenceModel",
    "config_slowdowns",
    "default_model",
    "gemm_slowdown_of",
    "interference_ops",
    "model_from_doc",
    "model_from_setting",
    "model_to_toml",
    "replay_slowdowns",
]
