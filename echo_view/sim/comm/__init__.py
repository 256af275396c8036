"""Collective communication models: how long an NCCL collective takes on a cluster.

A model answers :meth:`CommModel.collective_time_ns`; :class:`NcclModel` also tells how NCCL
would run the call (:class:`CollectiveEstimate`). ``nbytes`` is the per-rank payload as in
:class:`~echo_view.model.CollectiveTable`: the input for all-reduce, reduce-scatter and send,
the output for all-gather and recv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from echo_view.errors import ConfigError, in_file
from echo_view.model import CollectiveKind
from echo_view.model.toml_file import parse_toml
from echo_view.sim.cluster import Cluster
from echo_view.sim.comm.alphabeta import (
    AlphaBetaModel,
    AlphaBetaParams,
    alphabeta_from_mapping,
    alphabeta_to_toml,
)
from echo_view.sim.comm.estimate import CollectiveEstimate, bus_factor
from echo_view.sim.comm.nccl import NcclModel
from echo_view.sim.comm.params import (
    CommParams,
    comm_params_from_mapping,
    comm_params_to_toml,
)


@runtime_checkable
class CommModel(Protocol):
    """What the simulator asks of a communication model."""

    def collective_time_ns(
        self, kind: CollectiveKind, nbytes: int, ranks: Sequence[int], cluster: Cluster
    ) -> int:
        """Transfer time of one collective once every participant has arrived."""
        ...


def model_for_library(library: str, base: CommModel) -> CommModel:
    """The model that times a collective launched by ``library`` (a trace's
    :class:`~echo_view.model.comm_kernels.CommKernelInfo` ``library``): DeepEP's all-to-all
    by :class:`~echo_view.sim.comm.deepep.DeepEPModel` (other kinds by ``base``), NCCL's by
    ``base``."""
    if library == "deepep":
        from echo_view.sim.comm.deepep import DeepEPModel

        return DeepEPModel(fallback=base if isinstance(base, NcclModel) else None)
    return base


#: Model kinds a TOML file can declare in ``[model] kind = ...``.
MODEL_KINDS = ("nccl", "alphabeta")


def comm_model_from_toml(text: str, path: str | None = None) -> NcclModel | AlphaBetaModel:
    """The model a ``comm.toml`` (as ``echo-view calibrate comm`` writes it) describes."""
    data = parse_toml(text, path)
    return comm_model_from_mapping(data, path)


def comm_model_from_mapping(
    data: Mapping[str, Any], path: str | None = None
) -> NcclModel | AlphaBetaModel:
    if not data:  # an empty file read as the defaults, labelled calibrated
        raise ConfigError(
            "the file holds no model (no [model] table, no constants)",
            path=path,
            hint="write one with `echo-view calibrate comm`, or leave out --model",
        )
    model = data.get("model", {})
    if not isinstance(model, Mapping):
        raise ConfigError("[model] must be a table", path=path)
    kind = model.get("kind", "nccl")
    with in_file(path):  # some checks (the dataclasses' own) do not know the file
        if kind == "nccl":
            return NcclModel(comm_params_from_mapping(data, path))
        if kind == "alphabeta":
            return AlphaBetaModel(alphabeta_from_mapping(data, path))
    raise ConfigError(
        f"unknown model kind {kind!r}", path=path, where="model.kind",
        hint=f"one of: {', '.join(MODEL_KINDS)}",
    )  # fmt: skip


def comm_model_to_toml(
    model: NcclModel | AlphaBetaModel, fit: Mapping[str, Any] | None = None
) -> str:
    """TOML text that :func:`comm_model_from_toml` reads back into an equal model."""
    if isinstance(model, NcclModel):
        return comm_params_to_toml(model.params, fit)
    return alphabeta_to_toml(model.params, fit)


__all__ = [
    "MODEL_KINDS",
    "AlphaBetaModel",
    "AlphaBetaParams",
    "CollectiveEstimate",
    "CommModel",
    "CommParams",
    "NcclModel",
    "bus_factor",
    "comm_model_from_mapping",
    "comm_model_from_toml",
    "comm_model_to_toml",
    "model_for_library",
]
