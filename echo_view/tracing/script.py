"""Trace a user's own PyTorch training step into a :class:`TracedGraph`, ex-situ.

``FILE.py[:FUNCTION]`` (default ``train_step``) builds its model and runs one training step —
forward, backward, optimizer step — with ordinary ``torch.distributed`` code (DDP, FSDP2's
``fully_shard``, DTensor tensor parallelism, explicit collectives). It is run once per traced
rank as that rank of a fake process group, under a fake tensor mode (:mod:`script_env`): no
GPU, no communication, no weights. The :class:`Recorder` sees every aten op and every
collective that reaches the dispatcher; ops before the first module forward (building and
sharding the model, making the batch) are set up, not recorded.

Phases: ``forward`` runs from the first module forward to the first op autograd runs;
``backward`` from there (everything autograd runs, and what the script does before the
optimizer: gradient clipping, FSDP2's last reductions); ``optimizer`` from the first
``torch.optim`` step on. A second forward outside backward (gradient accumulation inside the
function) is refused: the function runs one micro-batch; the config's batch repeats it.

Roles: rank 0 and the last rank are traced one after the other, each in a fresh process
(:func:`~echo_view.tracing.script_run.start_rank`: isolation and a hard time limit, not
parallelism); identical programs make one role for every
rank (ranks of a data-, tensor- or context-parallel layout differ only in their index). Scripts
that pipeline are not supported. Collectives carry their group's parallel axis, found by
matching the group's ranks with the layout's groups of the traced rank (an MoE layout's
expert groups too: ``ep``, ``edp``, ``etp``, :class:`~echo_view.sim.layout.Layout`); every
collective the step needs is in the graph, so the composer adds none (``meta["explicit_comm"]``).

MoE: an all-to-all over the expert-parallel group is a token dispatch or combine. In each
pass they alternate, dispatch first (forward: dispatch, combine per layer; backward: the
combine's gradient travels as a dispatch does, then the dispatch's as a combine), and are
named as the built-in MoE layer names them (:data:`~echo_view.sim.moe.A2A_PHASES`), so that
the composer times them by the same routed all-to-all model. A script's routing is traced
balanced: the meta device cannot compute the split sizes of an all-to-all-v.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from echo_view.errors import InputError
from echo_view.model.config import ParallelConfig
from echo_view.model.graph import AXES, OpTable, Role, TracedGraph
from echo_view.model.kinds import CollectiveKind
from echo_view.model.strings import StringTable
from echo_view.sim.layout import Layout
from echo_view.sim.moe import a2a_op
from echo_view.tracing.script_run import (
    DEFAULT_TIMEOUT_S,
    RankProgram,
    ScriptSpec,
    finish_rank,
    start_rank,
    stop_rank,
)

__all__ = ["DEFAULT_TIMEOUT_S", "ScriptSpec", "ScriptTrace", "trace_script"]

#: Parallel axes a collective's group is matched against, in this order (the expert axes of
#: an MoE layout last: a group that is both, such as ``edp`` when ``ep = 1``, is ``dp``).
_AXES = ("tp", "dp", "cp", "pp", "ep", "edp", "etp")
#: The order for an all-to-all: token dispatch and combine run over the expert-parallel group
#: (which is the data-parallel group when ``ep`` spans a whole stage).
_A2A_AXES = ("ep", *(a for a in _AXES if a != "ep"))
#: Graph names of an expert-parallel all-to-all, by its place in a pass (first, second).
_A2A_NAMES = (a2a_op("nccl", "dispatch"), a2a_op("nccl", "combine"))


def _all_to_all_groups(prog: RankProgram) -> list[tuple[int, ...]]:
    return [
        ranks
        for phase, groups in prog.groups.items()
        for row, ranks in groups
        if prog.tables[phase].coll(row) == CollectiveKind.ALL_TO_ALL
    ]


def infer_layout(programs: list[RankProgram], world: int) -> Layout:
    """A layout for a script traced without a config: tensor parallel over the smallest
    group of consecutive ranks smaller than the world (none: tp = 1), data parallel across;
    expert parallel over the groups of its all-to-alls (consecutive data-parallel ranks)."""
    tp = world
    ep = 1
    for prog in programs:
        a2a = list({id(g): g for g in _all_to_all_groups(prog)}.values())
        # Each distinct group once (the recorder shares one tuple per group), not once per
        # collective: a group may hold a million ranks.
        distinct = {id(r): r for groups in prog.groups.values() for _, r in groups}
        for ranks in distinct.values():
            consecutive = ranks[-1] - ranks[0] == len(ranks) - 1 and (
                list(ranks) == list(range(ranks[0], ranks[0] + len(ranks)))
            )
            if ranks in a2a:  # identity first, then equality
                ep = max(ep, len(ranks))
            elif 1 < len(ranks) < world and consecutive:
                tp = min(tp, len(ranks))
    tp = 1 if tp == world else tp
    dp = world // tp
    return Layout(tp=tp, pp=1, dp=dp, ep=ep if dp % ep == 0 else 1)


def axis_of(
    ranks: tuple[int, ...], rank: int, layout: Layout, kind: CollectiveKind | None = None
) -> str:
    """The parallel axis whose group of ``rank`` is exactly ``ranks`` (an all-to-all's
    ``kind``: the expert-parallel group first)."""
    members = frozenset(ranks)
    for axis in _A2A_AXES if kind == CollectiveKind.ALL_TO_ALL else _AXES:
        if _group_set(layout, axis, rank) == members:
            return axis
    raise ValueError(ranks)


@functools.lru_cache(maxsize=2 * len(_AXES))
def _group_set(layout: Layout, axis: str, rank: int) -> frozenset[int]:
    # Once per axis and rank, not per collective: a data-parallel group is the whole world
    # (a script traced at --world 131,072 spent 8 s building the same groups again). Room for
    # the two ranks a trace names, no more: at --world 1,000,000 a group set is tens of MB.
    return frozenset(layout.group(axis, rank))


def _with_axes(
    prog: RankProgram, layout: Layout, spec: ScriptSpec, strings: StringTable
) -> dict[str, OpTable]:
    """``prog``'s tables with each collective's axis set; the all-to-alls over the EP group
    named as MoE dispatch and combine (module docstring)."""
    out = {}
    a2a_names = [strings.intern(n) for n in _A2A_NAMES]
    # Each distinct group once (one shared tuple per group; its set costs a pass over it).
    axes: dict[tuple[int, bool], str] = {}

    def axis_for(ranks: tuple[int, ...], kind: CollectiveKind) -> str:
        key = (id(ranks), kind == CollectiveKind.ALL_TO_ALL)
        if key not in axes:
            axes[key] = axis_of(ranks, prog.rank, layout, kind)
        return axes[key]

    for phase, table in prog.tables.items():
        axis = np.array(table.axis, copy=True)
        name = np.array(table.name, copy=True)
        ep_a2a = 0
        for row, ranks in prog.groups[phase]:
            kind = table.coll(row)
            try:
                axis[row] = AXES.index(axis_for(ranks, kind))
            except ValueError:
                shown = ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
                raise InputError(
                    f"rank {prog.rank}'s {phase} runs a collective over ranks [{shown}], no "
                    f"tp/dp/cp/pp/ep/edp/etp group of the layout tp={layout.tp} "
                    f"dp={layout.dp} cp={layout.cp} pp={layout.pp} ep={layout.ep} "
                    f"etp={layout.etp}",
                    path=spec.path,
                    hint="set [parallel] in the config to the layout the script builds",
                ) from None
            if kind == CollectiveKind.ALL_TO_ALL and AXES[axis[row]] == "ep":
                name[row] = a2a_names[ep_a2a % 2]
                ep_a2a += 1
        out[phase] = replace(table, axis=axis, name=name)
    return out


@dataclass(frozen=True, eq=False)
class ScriptTrace:
    """The traced graph and what was traced, for the command to report."""

    graph: TracedGraph
    ranks: tuple[int, ...]
    reason: str


def trace_script(
    spec: ScriptSpec,
    world: int,
    *,
    offered: Mapping[str, Any] | None = None,
    required: Mapping[str, Any] | None = None,
    parallel: ParallelConfig | None = None,
    config: dict[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ScriptTrace:
    """Trace the rank roles of ``spec`` run on ``world`` ranks (module docstring): the
    function gets ``required`` (all must be its parameters) and those of ``offered`` it takes;
    collectives are matched with the groups of ``parallel`` (default: :func:`infer_layout`);
    ``config`` is stored in the graph."""
    strings = StringTable()
    ranks = (0,) if world == 1 else (0, world - 1)
    programs = []
    for r in ranks:
        job = start_rank(spec, offered or {}, required or {}, r, world, timeout_s)
        try:
            programs.append(finish_rank(job, strings))
        finally:
            stop_rank(job)
    if len(programs) == 1:
        reason = "one rank"
    elif programs[0].same_as(programs[1]):
        reason = f"ranks 0 and {world - 1} run identical programs: one role for all ranks"
    else:
        reason = (
            f"ranks 0 and {world - 1} differ; rank 0 stands for every rank (scripts are traced "
            "as one pipeline stage)"
        )
    lay = Layout.of(parallel) if parallel is not None else infer_layout(programs, world)
    first = programs[0]
    tables = _with_axes(first, lay, spec, strings)
    for prog in programs[1:]:
        _with_axes(prog, lay, spec, strings)  # every traced rank's groups must fit the layout
    role = Role(
        (0,),
        (tables["forward"],),
        (tables["backward"],),
        tables["optimizer"],
        first.params,
        first.grad_dtype_bytes,
    )
    meta = {
        "script": spec.path.name,
        "function": spec.function,
        "explicit_comm": True,
        "traced_ranks": list(ranks),
        "roles_reason": reason,
        "layout": {"tp": lay.tp, "dp": lay.dp, "cp": lay.cp, "pp": lay.pp}
        | ({"ep": lay.ep, "etp": lay.etp} if lay.ep * lay.etp > 1 else {}),
        "torch": str(torch.__version__),
    }
    graph = TracedGraph(strings, (role,), config=config or {}, meta=meta)
    return ScriptTrace(graph, ranks, reason)
