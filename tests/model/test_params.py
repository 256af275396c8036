"""The parameter-set pattern: bounds, flat names, TOML tables, renamed keys, reference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import pytest

from echo_view.errors import ConfigError, Deprecated
from echo_view.model.params import ParamSet, param, switch_value
from echo_view.sim.comm.alphabeta import alphabeta_from_mapping
from echo_view.sim.comm.params import CommParams
from echo_view.sim.kernel_cost import ComputeParams


@dataclass(frozen=True)
class _Toy(ParamSet):
    NOUN: ClassVar[str] = "toy parameter"
    ELEMENTS: ClassVar[tuple[str, ...]] = ("a", "b")
    RENAMED: ClassVar[Mapping[str, str]] = {"speed.old_gbs": "gbs"}

    eff: float = param(0.5, help="an efficiency", unit="fraction", lo=0.01, hi=1.0, section="speed")
    gbs: tuple[float, float] = param(
        (1.0, 2.0), help="per element", unit="GB/s", lo=1e-6, hi=1e9, section="speed"
    )
    gap_ns: int = param(10, help="a gap", unit="ns", lo=0, hi=1e12, integer=True)
    source: str = "defaults"


def test_overrides_are_checked_against_bounds() -> None:
    toy = _Toy().with_overrides({"eff": "0.25", "gbs.b": 4, "gap_ns": 7.0})
    assert (toy.eff, toy.gbs, toy.gap_ns) == (0.25, (1.0, 4.0), 7)
    # A whole-number parameter was cut (7.9 -> 7) without a word; "１２" read as 12.
    with pytest.raises(ConfigError, match=r"'gap_ns' must be a whole number, got 7\.9"):
        _Toy().with_overrides({"gap_ns": 7.9})
    with pytest.raises(ConfigError, match="'gap_ns' needs a number"):
        _Toy().with_overrides({"gap_ns": "１２"})
    with pytest.raises(ConfigError, match=r"toy parameter 'eff' must be a number from 0.01 to 1"):
        _Toy().with_overrides({"eff": 2})
    for bad in (float("nan"), float("inf"), True, "fast"):
        with pytest.raises(ConfigError, match="toy parameter 'eff'"):
            _Toy().with_overrides({"eff": bad})
    with pytest.raises(ConfigError, match=r"unknown toy parameter 'ef'.*did you mean 'eff'"):
        _Toy().with_overrides({"ef": 0.5})


def test_flat_names_and_unchecked_fits() -> None:
    assert _Toy().flat() == {"eff": 0.5, "gbs.a": 1.0, "gbs.b": 2.0, "gap_ns": 10.0}
    fitted = _Toy().with_flat({"gbs.a": 3.0}, source="fit")
    assert fitted.gbs == (3.0, 2.0) and fitted.source == "fit"
    for bad in ("gbs.c", "eff.a", "nope"):
        with pytest.raises(KeyError):
            _Toy().with_flat({bad: 1.0})


def test_tables_round_trip_and_renamed_keys_warn() -> None:
    toy = _Toy(eff=0.75, gbs=(5.0, 6.0), gap_ns=3)
    tables = toy.to_tables()
    assert tables == {"speed": {"eff": 0.75, "gbs": {"a": 5.0, "b": 6.0}}, "gap_ns": 3}
    assert _Toy.from_tables(tables) == toy
    with pytest.warns(Deprecated, match="use speed.gbs"):
        old = _Toy.from_tables({"speed": {"old_gbs": {"a": 9.0}}})
    assert old.gbs == (9.0, 2.0)
    with pytest.raises(ConfigError, match=r"unknown element 'c'"):
        _Toy.from_tables({"speed": {"gbs": {"c": 1.0}}})
    with pytest.raises(ConfigError, match="unknown key"):
        _Toy.from_tables({"speed": {"efff": 1.0}})


def test_reference_lists_every_parameter() -> None:
    assert [row[0] for row in _Toy.reference()] == ["speed.eff", "speed.gbs", "gap_ns"]
    assert {row[0] for row in ComputeParams.reference()} >= {"gemm_eff_max", "kernel_gap_ns"}
    assert "bandwidth.channel_gbytes_per_s" in {row[0] for row in CommParams.reference()}


def test_the_three_cost_model_sets_share_the_pattern() -> None:
    for cls in (ComputeParams, CommParams):
        assert issubclass(cls, ParamSet) and cls.specs()
    # An alpha-beta efficiency of 0 divides by zero: refused like every other bound.
    with pytest.raises(ConfigError, match="alpha-beta parameter 'net_eff' must be"):
        alphabeta_from_mapping({"alphabeta": {"net_eff": 0}})


def test_a_file_may_hold_only_its_parameter_tables_and_the_callers() -> None:
    with pytest.raises(ConfigError, match=r"unknown table \[alphabet\].*alphabeta"):
        alphabeta_from_mapping({"alphabet": {"alpha_us": 1.0}})
    assert _Toy.from_tables({"speed": {"eff": 0.2}, "notes": {}}, others=("notes",)).eff == 0.2
    with pytest.raises(ConfigError, match=r"unknown table \[notes\]"):
        _Toy.from_tables({"notes": {}}, others=())


def test_switch_words() -> None:
    assert [switch_value(w) for w in ("on", " TRUE ", "1", "default")] == [True] * 4
    assert [switch_value(w) for w in ("off", "False", "0", "none")] == [False] * 4
    assert switch_value("model.toml") is None and switch_value("") is None
