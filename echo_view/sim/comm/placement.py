"""Where a communicator's ranks sit: how many nodes it spans and how many of its ranks share a
node. This is all the collective models need to know about a group's topology."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from echo_view.sim.cluster import Cluster

PROTOCOLS = ("LL", "LL128", "SIMPLE")
#: Link tiers a hop can cross.
TIERS = ("nvlink", "pcie", "net")


@dataclass(frozen=True, slots=True)
class Placement:
    """A group of ``nranks`` ranks over ``nodes`` nodes.

    ``ppn_max`` / ``ppn_min`` are the most / fewest group ranks on one node: the busiest node
    sets the number of intra-node hops, the node with the fewest ranks has the fewest NICs for
    the same inter-node traffic. ``intra`` is the tier between GPUs of one node.
    """

    nranks: int
    nodes: int
    ppn_max: int
    ppn_min: int
    intra: str

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1


def place(ranks: Sequence[int], cluster: Cluster) -> Placement:
    """The placement of ``ranks`` on ``cluster`` (duplicates count once)."""
    unique = set(ranks)
    if not unique:
        raise ValueError("a collective needs at least one rank")
    per_node = Counter(cluster.node_of(r) for r in unique)
    intra = "pcie" if cluster.fabric == "pcie" else "nvlink"
    return Placement(
        nranks=len(unique),
        nodes=len(per_node),
        ppn_max=max(per_node.values()),
        ppn_min=min(per_node.values()),
        intra=intra,
    )
