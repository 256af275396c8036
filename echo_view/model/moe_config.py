"""Mixture-of-Experts keys of a workload config's ``[model]`` table and their layout rules.

The keys follow Megatron-Core's MoE arguments (``--num-experts``, ``--moe-router-topk``,
``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``,
``--moe-layer-freq`` with its leading dense layers, ``--moe-expert-capacity-factor``,
``--moe-router-score-function``, ``--moe-router-load-balancing-type``,
``--moe-token-dispatcher-type``, ``--moe-grouped-gemm``).
Expert parallelism follows Megatron-Core's MoE parallel folding (Liu et al. 2025, "MoE Parallel
Folding: Heterogeneous Parallelism Mappings for Efficient Large-Scale MoE Model Training with
Megatron Core", arXiv 2504.14960; Megatron-Core's MoE README, "MoE Parallel Folding"): the
attention layers of a pipeline stage use its ``tp * cp * dp`` ranks as tensor, context and data
parallel; the MoE layers fold the same ranks into expert tensor parallel (``etp``, fastest),
expert parallel (``ep``) and expert data parallel (``edp``), with ``etp * ep * edp = tp * cp *
dp``. With ``etp = tp`` and ``cp = 1`` this is the classic layout: the EP ranks are ``ep``
consecutive data-parallel ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Upper bounds (far beyond any published model: DeepSeek-V3 has 256 routed experts, top-8).
MAX_EXPERTS = 1 << 14
MAX_SHARED_EXPERTS = 64
ROUTERS = ("softmax", "sigmoid")
LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "none")
DISPATCHERS = ("alltoall", "allgather", "deepep")
#: The ``[model]`` keys of this module (all optional; any of them needs ``experts``).
KEYS = (
    "experts",
    "top_k",
    "moe_ffn_hidden",
    "shared_experts",
    "shared_ffn_hidden",
    "first_dense_layers",
    "capacity_factor",
    "router",
    "load_balancing",
    "routing_imbalance",
    "dispatcher",
    "moe_node_limit",
    "moe_grouped_gemm",
)
#: Keys that change only how the MoE communication is timed, never a rank's ops.
SIMULATION_ONLY_KEYS = ("moe_node_limit",)


@dataclass(frozen=True, slots=True)
class MoEConfig:
    """The MoE layer that replaces the dense MLP of every layer after ``first_dense_layers``.

    ``shared_ffn_hidden`` is the FFN size of all shared experts together (Megatron-Core's
    ``moe_shared_expert_intermediate_size``: ``shared_experts`` times one shared expert's
    size), run as one dense MLP beside the routed experts. ``capacity_factor`` ``None`` is
    dropless; with a factor ``C`` an expert keeps at most ``C`` times the mean tokens.
    ``routing_imbalance`` is the busiest expert's tokens over the mean (1.0: balanced).
    ``moe_node_limit`` is node-limited routing: each token's experts lie on at most that many
    nodes (DeepSeek-V3: 4, arXiv 2412.19437 sections 2.1.2 and 3.2; Megatron-Core's
    ``--moe-router-group-topk`` with one group per node); ``None``: no limit.
    ``moe_grouped_gemm`` runs a rank's local experts as one grouped GEMM per projection
    (Megatron-Core's ``--moe-grouped-gemm``: Transformer Engine's ``GroupedLinear``); false runs
    them one after another (``SequentialMLP``, Megatron-Core's default without the flag).
    ``load_balancing`` is the router's auxiliary loss (Megatron-Core's
    ``--moe-router-load-balancing-type``, default ``aux_loss``; ``seq_aux_loss`` is the
    per-sequence form; ``none`` runs none).
    """

    experts: int
    top_k: int = 2
    moe_ffn_hidden: int = 0
    shared_experts: int = 0
    shared_ffn_hidden: int = 0
    first_dense_layers: int = 0
    capacity_factor: float | None = None
    router: str = "softmax"
    load_balancing: str = "aux_loss"
    routing_imbalance: float = 1.0
    dispatcher: str = "alltoall"
    moe_node_limit: int | None = None
    moe_grouped_gemm: bool = True

    @property
    def imbalance(self) -> float:
        """The busiest expert's load over the mean once the capacity drops its excess."""
        if self.capacity_factor is None:
            return self.routing_imbalance
        return min(self.routing_imbalance, self.capacity_factor)

    def to_mapping(self) -> dict[str, Any]:
        """The ``[model]`` keys that give this config back (defaults left out)."""
        out: dict[str, Any] = {"experts": self.experts, "top_k": self.top_k}
        out["moe_ffn_hidden"] = self.moe_ffn_hidden
        defaults: tuple[tuple[str, Any, Any], ...] = (
            ("shared_experts", self.shared_experts, 0),
            ("shared_ffn_hidden", self.shared_ffn_hidden, 0),
            ("first_dense_layers", self.first_dense_layers, 0),
            ("capacity_factor", self.capacity_factor, None),
            ("router", self.router, "softmax"),
            ("load_balancing", self.load_balancing, "aux_loss"),
            ("routing_imbalance", self.routing_imbalance, 1.0),
            ("dispatcher", self.dispatcher, "alltoall"),
            ("moe_node_limit", self.moe_node_limit, None),
            ("moe_grouped_gemm", self.moe_grouped_gemm, True),
        )
        out.update({k: v for k, v, d in defaults if v != d})
        return out


def parse_moe(section: Any, ffn_hidden: int) -> MoEConfig | None:
    """The MoE keys of ``[model]`` (``section``: the config reader's table), or ``None`` for
    a dense model; a key without ``experts`` is an error naming it."""
    data = section.data
    section.used.update(KEYS)  # an unknown key's hint lists them on dense models too
    if "experts" not in data:
        for key in KEYS:
            if key in data:
                raise section._err(key, "needs model.experts (the routed experts per MoE layer)")
        return None
    experts = _int(section, "experts", None, 1, MAX_EXPERTS)
    top_k = _int(section, "top_k", 2, 1, experts)
    moe_ffn = _int(section, "moe_ffn_hidden", ffn_hidden, 1, 1 << 22)
    shared = _int(section, "shared_experts", 0, 0, MAX_SHARED_EXPERTS)
    if "shared_ffn_hidden" in data and shared == 0:
        raise section._err("shared_ffn_hidden", "needs shared_experts >= 1")
    shared_ffn = _int(section, "shared_ffn_hidden", shared * moe_ffn, 1 if shared else 0, 1 << 22)
    capacity = section.get("capacity_factor", float)
    if capacity is not None and not 1.0 <= capacity <= experts:
        raise section._err(
            "capacity_factor", f"must be between 1 and the expert count {experts}, got {capacity}"
        )
    imbalance = section.get("routing_imbalance", float, 1.0)
    if not 1.0 <= imbalance <= experts:
        raise section._err(
            "routing_imbalance",
            f"max / mean tokens per expert must be between 1 and the expert count {experts}, "
            f"got {imbalance}",
        )
    return MoEConfig(
        experts=experts,
        top_k=top_k,
        moe_ffn_hidden=moe_ffn,
        shared_experts=shared,
        shared_ffn_hidden=shared_ffn,
        first_dense_layers=_int(section, "first_dense_layers", 0, 0, 10_000),
        capacity_factor=capacity,
        router=section.choice("router", ROUTERS, "softmax"),
        load_balancing=section.choice("load_balancing", LOAD_BALANCING, "aux_loss"),
        routing_imbalance=imbalance,
        dispatcher=section.choice("dispatcher", DISPATCHERS, "alltoall"),
        moe_node_limit=(
            _int(section, "moe_node_limit", None, 1, experts) if "moe_node_limit" in data else None
        ),
        moe_grouped_gemm=section.get("moe_grouped_gemm", bool, True),
    )


def _int(section: Any, key: str, default: int | None, lo: int, hi: int) -> int:
    value = section.get(key, int, default, required=default is None)
    if not lo <= value <= hi:
        raise section._err(key, f"must be an integer from {lo} to {hi:,}, got {value}")
    return int(value)


def check_moe_layout(cfg: Any, err: Any) -> None:
    """Megatron-Core's rules for an MoE model's layout (``err(where, message)`` builds the
    error): experts split evenly over ``ep``; ``etp * ep`` divides the ``tp * cp * dp`` ranks
    of a stage (parallel folding); tensor parallelism with sequence parallelism; the leading
    dense layers inside the first model chunk (so that the middle pipeline stages stay alike)."""
    par, mod = cfg.parallel, cfg.model
    moe: MoEConfig | None = mod.moe
    if moe is None:
        if par.ep > 1 or par.etp is not None:
            key = "ep" if par.ep > 1 else "etp"
            raise err(f"parallel.{key}", "expert parallelism needs an MoE model (model.experts)")
        return
    if mod.script is not None:
        _check_script_moe(moe, err)
    if par.fsdp != "none":
        raise err("parallel.fsdp", "FSDP with MoE layers is not modelled: leave fsdp unset")
    if par.tp_comm_overlap:
        raise err(
            "parallel.tp_comm_overlap",
            "is not modelled with MoE layers (their expert-parallel gathers would be taken for "
            "tensor-parallel ones): drop it",
        )
    if par.overlap_param_gather:
        raise err(
            "parallel.overlap_param_gather",
            "is not modelled with MoE layers (their parameters gather over two groups): drop it",
        )
    if moe.experts % par.ep:
        raise err("parallel.ep", f"{moe.experts} experts do not split over ep = {par.ep}")
    etp = par.expert_tp
    stage_ranks = par.tp * par.cp * par.dp
    if stage_ranks % (etp * par.ep):
        raise err(
            "parallel.ep",
            f"etp*ep = {etp}*{par.ep} does not divide the tp*cp*dp = {stage_ranks} ranks of a "
            "pipeline stage (Megatron-Core's MoE parallel folding)",
        )
    if moe.moe_ffn_hidden % etp:
        raise err("model.moe_ffn_hidden", f"{moe.moe_ffn_hidden} is not divisible by etp = {etp}")
    if moe.shared_ffn_hidden % par.tp:
        raise err(
            "model.shared_ffn_hidden", f"{moe.shared_ffn_hidden} is not divisible by tp = {par.tp}"
        )
    if (par.tp > 1 or etp > 1) and not par.sequence_parallel:
        raise err(
            "parallel.sequence_parallel",
            "MoE layers with tensor parallelism need sequence_parallel = true (as in "
            "Megatron-Core)",
        )
    if moe.dispatcher == "deepep" and etp > 1:
        raise err("model.dispatcher", "the deepep dispatcher needs etp = 1")
    if moe.first_dense_layers >= mod.layers:
        raise err(
            "model.first_dense_layers",
            f"{moe.first_dense_layers} dense layers leave no MoE layer of {mod.layers}",
        )


def _check_script_moe(moe: MoEConfig, err: Any) -> None:
    """A traced script's MoE layer routes as its code does: the keys that shape the built-in
    layer's routing (imbalance, capacity, dispatcher) would describe a layer that was not
    traced. Its all-to-alls are timed as balanced, the only routing the meta device can run."""
    if moe.routing_imbalance != 1.0:
        raise err(
            "model.routing_imbalance",
            "a script's routing is traced balanced (fake tensors hold no routing decisions): "
            "drop it, or use the built-in MoE layer",
        )
    if moe.capacity_factor is not None:
        raise err("model.capacity_factor", "a script drops tokens as its code does: drop it")
    if moe.dispatcher != "alltoall":
        raise err(
            "model.dispatcher",
            f"a script's {moe.dispatcher} dispatch is not traced (its all-to-alls are): drop it",
        )
    if not moe.moe_grouped_gemm:
        raise err(
            "model.moe_grouped_gemm",
            "a script's expert GEMMs are traced as its code runs them: drop it",
        )
    if moe.load_balancing != "aux_loss":
        raise err(
            "model.load_balancing",
            "a script's router computes whatever loss its code does (traced as it runs): drop it",
        )
