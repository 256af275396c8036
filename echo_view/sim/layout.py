"""Where each rank of a Megatron-style layout sits, and the groups it communicates in.

Ranks are laid out in Megatron-LM's default order ``tp-cp-dp-pp`` (tensor-parallel fastest):
``rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i``. Tensor-parallel groups are therefore
consecutive ranks (inside a node when ``tp <= gpus_per_node``), data-parallel groups stride by
``tp * cp``, and pipeline neighbours by ``tp * cp * dp``.

MoE layers fold a stage's ``tp * cp * dp`` ranks into expert tensor, expert and expert data
parallel groups in Megatron-Core's order ``etp-ep-edp`` (its expert rank generator, order
``tp-cp-ep-dp-pp`` with ``cp = 1``; :mod:`echo_view.model.moe_config`): stage-local rank
``(edp_i * ep + ep_i) * etp + etp_i``. So EP8 with ``etp = 1`` is eight consecutive ranks
(one node of eight GPUs) and EP64 spans eight such nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from echo_view.model.config import ParallelConfig

_EXPERT_AXES = ("ep", "etp", "edp", "etp_ep")


@dataclass(frozen=True, slots=True)
class Layout:
    """Rank arithmetic of one parallel layout."""

    tp: int
    pp: int
    dp: int
    cp: int = 1
    ep: int = 1
    etp: int = 1

    @classmethod
    def of(cls, p: ParallelConfig) -> Layout:
        return cls(p.tp, p.pp, p.dp, p.cp, p.ep, p.expert_tp)

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def rank(self, pp_i: int, dp_i: int = 0, cp_i: int = 0, tp_i: int = 0) -> int:
        """Global rank of the given coordinates."""
        return ((pp_i * self.dp + dp_i) * self.cp + cp_i) * self.tp + tp_i

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """``(pp_i, dp_i, cp_i, tp_i)`` of ``rank``."""
        tp_i = rank % self.tp
        rest = rank // self.tp
        cp_i = rest % self.cp
        rest //= self.cp
        return rest // self.dp, rest % self.dp, cp_i, tp_i

    def group(self, axis: str, rank: int) -> tuple[int, ...]:
        """The ranks of ``rank``'s group along ``axis`` (``tp``, ``dp``, ``cp``, ``pp``,
        ``dp_cp``, ``tp_cp``: two of those together; ``ep``, ``etp``, ``edp``, ``etp_ep``:
        the expert groups of the MoE layers), ascending. One tuple per group, shared by its
        ranks: asking for every rank's data-parallel group builds each group once, not once per
        rank (8,192 ranks in one group were 67 M ranks computed)."""
        return _shared(self, axis, self._least(axis, rank))

    def _least(self, axis: str, rank: int) -> int:
        """The least rank of ``rank``'s group along ``axis``: its own coordinates with those
        the group varies at 0 (an unknown axis is refused by :meth:`_members`)."""
        if axis in _EXPERT_AXES:
            stage_size = self.tp * self.cp * self.dp
            local = rank % stage_size
            etp_i, rest = local % self.etp, local // self.etp
            ep_i, edp_i = rest % self.ep, rest // self.ep
            t = 0 if axis in ("etp", "etp_ep") else etp_i
            e = 0 if axis in ("ep", "etp_ep") else ep_i
            d = 0 if axis == "edp" else edp_i
            return rank - local + (d * self.ep + e) * self.etp + t
        pp_i, dp_i, cp_i, tp_i = self.coords(rank)
        return self.rank(
            0 if axis == "pp" else pp_i,
            0 if axis in ("dp", "dp_cp") else dp_i,
            0 if axis in ("cp", "tp_cp", "dp_cp") else cp_i,
            0 if axis in ("tp", "tp_cp") else tp_i,
        )

    def _members(self, axis: str, rank: int) -> tuple[int, ...]:
        if axis in _EXPERT_AXES:
            return self.expert_group(axis, rank)
        pp_i, dp_i, cp_i, tp_i = self.coords(rank)
        if axis == "tp":
            return tuple(self.rank(pp_i, dp_i, cp_i, t) for t in range(self.tp))
        if axis == "dp":
            return tuple(self.rank(pp_i, d, cp_i, tp_i) for d in range(self.dp))
        if axis == "cp":
            return tuple(self.rank(pp_i, dp_i, c, tp_i) for c in range(self.cp))
        if axis == "pp":
            return tuple(self.rank(p, dp_i, cp_i, tp_i) for p in range(self.pp))
        if axis == "tp_cp":  # the sequence's shards: Megatron's tensor-and-context group
            cps, tps = range(self.cp), range(self.tp)
            return tuple(self.rank(pp_i, dp_i, c, t) for c in cps for t in tps)
        if axis == "dp_cp":  # Megatron reduces gradients over data and context parallel ranks
            return tuple(
                self.rank(pp_i, d, c, tp_i) for d in range(self.dp) for c in range(self.cp)
            )
        raise ValueError(f"unknown parallel axis {axis!r}")

    def expert_group(self, axis: str, rank: int) -> tuple[int, ...]:
        """``rank``'s expert tensor (``etp``), expert (``ep``), expert data (``edp``) or
        expert tensor and expert (``etp_ep``, Megatron-Core's tensor-and-expert group)
        parallel group (see the module docstring)."""
        stage_size = self.tp * self.cp * self.dp
        base = rank - rank % stage_size
        local = rank % stage_size
        etp_i, rest = local % self.etp, local // self.etp
        ep_i, edp_i = rest % self.ep, rest // self.ep
        edp = stage_size // (self.etp * self.ep)

        def at(t: int, e: int, d: int) -> int:
            return base + (d * self.ep + e) * self.etp + t

        if axis == "etp":
            return tuple(at(t, ep_i, edp_i) for t in range(self.etp))
        if axis == "ep":
            return tuple(at(etp_i, e, edp_i) for e in range(self.ep))
        if axis == "etp_ep":
            return tuple(at(t, e, edp_i) for e in range(self.ep) for t in range(self.etp))
        return tuple(at(etp_i, ep_i, d) for d in range(edp))


#: The groups built for the latest layout asked about, by (axis, least rank). One layout's
#: groups at a time: a search goes through thousands of layouts, and a group of a million-GPU
#: layout is a tuple of a million ranks.
_GROUPS: dict[tuple[str, int], tuple[int, ...]] = {}
_GROUPS_OF: list[Layout] = []


def _shared(layout: Layout, axis: str, least: int) -> tuple[int, ...]:
    """The group of ``layout`` whose least rank is ``least``, built once."""
    if not _GROUPS_OF or _GROUPS_OF[0] != layout:
        _GROUPS.clear()
        _GROUPS_OF[:] = [layout]
    group = _GROUPS.get((axis, least))
    if group is None:
        group = _GROUPS[(axis, least)] = layout._members(axis, least)
    return group
