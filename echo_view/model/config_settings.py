"""``--set parallel.KEY=VALUE``: a config's simulation-only parallel settings changed for one
prediction, without editing the file and without tracing again.

Only the keys of :data:`~echo_view.model.config.SIMULATION_ONLY` that leave the traced graph as
it is may be set (``fsdp`` changes the graph: it is edited in the file). The new value is
checked as the file's own would be (:func:`~echo_view.model.config.parse_workload_config`), so
``--set parallel.overlap_param_gather=true`` without the distributed optimizer is refused as
the same key in the file is.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from typing import Any

from echo_view.errors import ConfigError
from echo_view.model.config import SIMULATION_ONLY, WorkloadConfig
from echo_view.model.config_keys import config_to_mapping, tracing_key
from echo_view.model.config_parse import parse_workload_config

#: The ``parallel`` keys ``--set`` may change for a workload config.
SETTABLE_PARALLEL: tuple[str, ...] = tuple(k for k in SIMULATION_ONLY if k != "fsdp")
#: Their ``--set`` spellings.
PARALLEL_SET_KEYS: tuple[str, ...] = tuple(f"parallel.{k}" for k in SETTABLE_PARALLEL)


def setting_value(text: str) -> Any:
    """A ``--set`` value as TOML reads a scalar (``true``, ``40000000``, ``"ring"``), ``True``
    / ``False`` in either case (the Python API passes ``str(value)``), else the text itself
    (which the key's check then refuses where it wants another type)."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if "\n" in text or "\r" in text or text.lstrip()[:1] in ("[", "{"):
        return text  # one scalar only (deeply nested arrays would also exhaust the parser)
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError, ValueError):  # (ValueError: > 4,300 digits)
        return text
    return value if isinstance(value, bool | int | float | str) else text


def with_parallel_settings(cfg: WorkloadConfig, overrides: Mapping[str, str]) -> WorkloadConfig:
    """``cfg`` with the ``parallel.*`` knobs of ``overrides`` applied and checked (the others
    are left to their own readers); ``cfg`` itself when there are none."""
    settings = {
        k.removeprefix("parallel."): setting_value(v)
        for k, v in overrides.items()
        if k in PARALLEL_SET_KEYS
    }
    if not settings:
        return cfg
    data = config_to_mapping(cfg)
    data["parallel"] = {**data["parallel"], **settings}
    try:
        out = parse_workload_config(data, cfg.source)
    except ConfigError as exc:
        place = f"{exc.where}: " if exc.where else ""
        raise ConfigError(
            place + exc.message, path=cfg.source or None, where="--set", hint=exc.hint
        ) from None
    # The keys are simulation-only, so a graph traced for ``cfg`` is still the one for ``out``.
    assert tracing_key(out) == tracing_key(cfg), settings
    return out
