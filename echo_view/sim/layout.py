"""Where each rank of a Megatron-style layout sits, and the groups it communicates in.

Ranks are laid out in Megatron-LM's default order ``tp-cp-dp-pp`` (tensor-parallel fastest):
``rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i``. Tensor-parallel groups are therefore
consecutive ranks (inside a node when ``tp <= gpus_per_node``), data-parallel groups stride by
``tp * cp``, and pipeline neighbours by ``tp * cp * dp``.
"""

from __future__ import annotations

from dataclasses import dataclass

from echo_view.model.config import ParallelConfig


@dataclass(frozen=True, slots=True)
class Layout:
    """Rank arithmetic of one parallel layout."""

    tp: int
    pp: int
    dp: int
    cp: int = 1

    @classmethod
    def of(cls, p: ParallelConfig) -> Layout:
        return cls(p.tp, p.pp, p.dp, p.cp)

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
        """The ranks of ``rank``'s group along ``axis`` (``tp``, ``dp``, ``cp``, ``pp``, or
        ``dp_cp``: the data- and context-parallel ranks together)."""
        pp_i, dp_i, cp_i, tp_i = self.coords(rank)
        if axis == "tp":
            return tuple(self.rank(pp_i, dp_i, cp_i, t) for t in range(self.tp))
        if axis == "dp":
            return tuple(self.rank(pp_i, d, cp_i, tp_i) for d in range(self.dp))
        if axis == "cp":
            return tuple(self.rank(pp_i, dp_i, c, tp_i) for c in range(self.cp))
        if axis == "pp":
            return tuple(self.rank(p, dp_i, cp_i, tp_i) for p in range(self.pp))
        if axis == "dp_cp":  # Megatron reduces gradients over data and context parallel ranks
            return tuple(
                self.rank(pp_i, d, c, tp_i) for d in range(self.dp) for c in range(self.cp)
            )
        raise ValueError(f"unknown parallel axis {axis!r}")
