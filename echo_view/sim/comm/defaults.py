"""The collective model the simulator uses by default: the NCCL-like model with its constants
calibrated on the Echo nccl-tests logs (1-128 A100-SXM4-40GB, Azure NDv4), shipped as
``calibrated.toml`` beside this module and regenerated with (from the repository root)::

    echo-view calibrate comm samples/echo_nccl_tests/*.log \
        -o echo_view/sim/comm/calibrated.toml

The constants are physical (latencies per protocol and link tier, bandwidth efficiencies,
per-channel costs), so they carry over to other GPUs through each cluster's link bandwidths;
docs/comm-model.md lists what was and was not validated.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from echo_view.sim.comm import comm_model_from_toml
from echo_view.sim.comm.alphabeta import AlphaBetaModel
from echo_view.sim.comm.nccl import NcclModel


@cache
def default_comm_model() -> NcclModel | AlphaBetaModel:
    """The calibrated NCCL model (loaded once)."""
    text = files("echo_view.sim.comm").joinpath("calibrated.toml").read_text(encoding="utf-8")
    return comm_model_from_toml(text, "echo_view/sim/comm/calibrated.toml")
