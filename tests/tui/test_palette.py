"""The timeline palette stays readable in every built-in Textual theme."""

from __future__ import annotations

import pytest
from rich.color import Color as RichColor
from rich.style import Style
from textual.color import Color
from textual.theme import BUILTIN_THEMES

from echo_view.tui.palette import (
    EMPTY,
    LABEL,
    MIN_CONTRAST,
    TEXT_CONTRAST,
    contrast,
    palette_for,
    readable,
)
from echo_view.tui.raster import Window
from echo_view.tui.ruler import ruler_text
from echo_view.tui.tracks import N_CLASSES

HEX_THEMES = [name for name, t in BUILTIN_THEMES.items() if not t.ansi]


def _colour(c: RichColor | None) -> Color:
    assert c is not None and c.triplet is not None
    return Color(*c.triplet)


def _fg(style: Style) -> Color:
    return _colour(style.color)


@pytest.mark.parametrize("name", HEX_THEMES)
def test_every_colour_reads_on_the_background(name: str) -> None:
    pal = palette_for(BUILTIN_THEMES[name])
    bg = pal.background
    assert bg is not None
    for cls in range(N_CLASSES):
        glyph = pal.styles[cls * 4]
        assert contrast(_fg(glyph), bg) >= MIN_CONTRAST, (name, cls)
        label = pal.styles[cls * 4 + LABEL]
        assert contrast(_fg(label), _colour(label.bgcolor)) >= TEXT_CONTRAST, (name, cls)
    for text in (pal.text, pal.muted, pal.tick):
        assert contrast(_fg(text), bg) >= TEXT_CONTRAST, name
    assert pal.styles[EMPTY] == Style()


def test_light_and_dark_themes_differ() -> None:
    dark = palette_for(BUILTIN_THEMES["textual-dark"])
    light = palette_for(BUILTIN_THEMES["textual-light"])
    assert dark.colours != light.colours
    # The ruler's tick labels were #d0d0d0 on textual-light's #D0D0D0 panel: now the text colour.
    ruler = ruler_text(Window(0, 100_000, 60), 12, "time", light)
    ticks = [span.style for span in ruler.spans]
    assert ticks and all(isinstance(s, Style) and s == light.tick for s in ticks)
    assert light.background is not None and contrast(_fg(light.tick), light.background) >= 4.5


def test_ansi_themes_use_the_terminal_colours() -> None:
    pal = palette_for(BUILTIN_THEMES["ansi-dark"])
    assert pal.background is None
    assert all(not c.startswith("#") for c in pal.colours.values())


def test_readable_moves_away_from_the_background() -> None:
    bg = Color.parse("#E0E0E0")
    c = readable(Color.parse("#e5c07b"), bg)  # One Dark's yellow on a light grey: 1.4:1
    assert contrast(Color.parse("#e5c07b"), bg) < MIN_CONTRAST <= contrast(c, bg)
    assert c.brightness < Color.parse("#e5c07b").brightness
