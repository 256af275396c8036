"""Every ``--help`` text reads as plain prose: no reST or rich markup reaches the terminal."""

from __future__ import annotations

import argparse
import re

import pytest

from echo_view.cli import build_parser

#: reST roles and literals, rich tags.
MARKUP = re.compile(r"``|:(?:class|func|mod|meth|data|attr):`|\[/?(?:bold|dim|red|green)\b")


def _parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    out = {parser.prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out.update(_parsers(sub))
    return out


PARSERS = _parsers(build_parser())


def test_every_command_is_walked() -> None:
    assert {"echo-view check", "echo-view calibrate comm", "echo-view diff"} <= set(PARSERS)


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_help_has_no_markup(prog: str) -> None:
    text = PARSERS[prog].format_help()
    assert not MARKUP.search(text), MARKUP.findall(text)
