"""The timeline's colours for a Textual theme: one hue per display class, kept readable on the
theme's background.

Dark themes start from the One Dark hues, light ones from One Light's (Atom's syntax themes);
each colour is then darkened or lightened until it stands :data:`MIN_CONTRAST` apart from the
background by the WCAG 2 contrast ratio, so bars and names stay legible in every built-in theme.
ANSI themes (whose colours are the terminal's own) get the ANSI colour names, which the terminal
keeps readable on its background.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from rich.style import Style
from textual.color import Color
from textual.theme import Theme

from echo_view.model import EventKind
from echo_view.tui.tracks import COMM, N_CLASSES

#: WCAG 2 contrast ratio every glyph keeps against the background (3:1 is the "large text and
#: graphics" level; ruler and lane names, which are text, keep 4.5:1).
MIN_CONTRAST = 3.0
TEXT_CONTRAST = 4.5

# (dark, light) hue of each display class.
_HUES: dict[int, tuple[str, str]] = {
    int(EventKind.CPU_OP): ("#61afef", "#4078f2"),
    int(EventKind.PYTHON_FUNCTION): ("#56b6c2", "#0184bc"),
    int(EventKind.USER_ANNOTATION): ("#7f848e", "#696c77"),
    int(EventKind.GPU_ANNOTATION): ("#7f848e", "#696c77"),
    int(EventKind.RUNTIME): ("#e5c07b", "#986801"),
    int(EventKind.DRIVER): ("#e5c07b", "#986801"),
    int(EventKind.KERNEL): ("#98c379", "#50a14f"),
    int(EventKind.MEMCPY): ("#d19a66", "#c18401"),
    int(EventKind.MEMSET): ("#d19a66", "#c18401"),
    int(EventKind.SYNC): ("#e06c75", "#e45649"),
    int(EventKind.INSTANT): ("#ffffff", "#383a42"),
    int(EventKind.COUNTER): ("#abb2bf", "#383a42"),
    int(EventKind.OTHER): ("#abb2bf", "#383a42"),
    COMM: ("#c678dd", "#a626a4"),
}
_ANSI: dict[int, str] = {
    int(EventKind.CPU_OP): "blue",
    int(EventKind.PYTHON_FUNCTION): "cyan",
    int(EventKind.USER_ANNOTATION): "bright_black",
    int(EventKind.GPU_ANNOTATION): "bright_black",
    int(EventKind.RUNTIME): "yellow",
    int(EventKind.DRIVER): "yellow",
    int(EventKind.KERNEL): "green",
    int(EventKind.MEMCPY): "bright_red",
    int(EventKind.MEMSET): "bright_red",
    int(EventKind.SYNC): "red",
    int(EventKind.INSTANT): "default",
    int(EventKind.COUNTER): "default",
    int(EventKind.OTHER): "default",
    COMM: "magenta",
}
_MATCH = ("#ffd75f", "#b08800")

# Style ids: class * 4 + mode. EMPTY is the background.
GLYPH, LABEL, SELECTED, MATCH = 0, 1, 2, 3
EMPTY = N_CLASSES * 4
MATCH_MARK = EMPTY + 1


def contrast(a: Color, b: Color) -> float:
    """WCAG 2 contrast ratio of two opaque colours (1 to 21)."""

    def lum(c: Color) -> float:
        def ch(v: int) -> float:
            s = v / 255
            return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4

        return 0.2126 * ch(c.r) + 0.7152 * ch(c.g) + 0.0722 * ch(c.b)

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def readable(colour: Color, background: Color, ratio: float = MIN_CONTRAST) -> Color:
    """``colour`` darkened (on a light background) or lightened (on a dark one) until its
    contrast with ``background`` reaches ``ratio``."""
    towards = Color(0, 0, 0) if background.brightness > 0.5 else Color(255, 255, 255)
    for step in range(21):
        c = colour.blend(towards, step / 20)
        if contrast(c, background) >= ratio:
            return c
    return towards


def _ink(bg: Color) -> str:
    """Black or white, whichever reads better on ``bg``."""
    black, white = Color(0, 0, 0), Color(255, 255, 255)
    return "#000000" if contrast(bg, black) >= contrast(bg, white) else "#ffffff"


@dataclass(frozen=True, eq=False)
class Palette:
    """Every style the timeline draws with, by style id (class * 4 + mode, then EMPTY and
    MATCH_MARK), and the ruler's and lane column's text styles."""

    name: str
    styles: tuple[Style, ...]
    text: Style
    muted: Style
    tick: Style
    colours: dict[int, str] = field(default_factory=dict)
    """The glyph colour of each display class."""
    background: Color | None = None
    """The theme's background (None for ANSI themes: the terminal's own)."""

    @cached_property
    def truecolor(self) -> bool:
        """Every colour is an RGB triplet and nothing is dim: Textual's ANSI-to-truecolor
        filter would leave these styles unchanged."""
        styles = (*self.styles, self.text, self.muted, self.tick)
        return all(
            not s.dim and all(c is None or c.triplet is not None for c in (s.color, s.bgcolor))
            for s in styles
        )


def _styles(
    colours: dict[int, str], selected: tuple[str, str], match: tuple[str, str]
) -> list[Style]:
    out: list[Style] = []
    for cls in range(N_CLASSES):
        colour = colours.get(cls, colours[int(EventKind.OTHER)])
        # ANSI names are the terminal's colours: black text on them, as terminals draw it.
        label_fg = _ink(Color.parse(colour)) if colour.startswith("#") else "black"
        out += [
            Style(color=colour),
            Style(color=label_fg, bgcolor=colour),
            Style(color=selected[0], bgcolor=selected[1], bold=True),
            Style(color=match[0], bgcolor=match[1], bold=True),
        ]
    out.append(Style())  # EMPTY
    out.append(Style(color=match[1], bold=True))  # MATCH_MARK
    return out


_PALETTES: dict[tuple[object, ...], Palette] = {}


def palette_for(theme: Theme) -> Palette:
    """The timeline palette of a Textual theme (built once per theme)."""
    key = (theme.name, theme.background, theme.foreground, theme.dark, theme.ansi)
    if key not in _PALETTES:
        _PALETTES[key] = _build(theme)
    return _PALETTES[key]


def _build(theme: Theme) -> Palette:
    variables = theme.to_color_system().generate()
    bg_text, fg_text = variables["background"], variables["foreground"]
    if theme.ansi or not bg_text.startswith("#"):
        colours = dict(_ANSI)
        styles = _styles(colours, ("black", "white"), ("black", "yellow"))
        return Palette(
            theme.name, tuple(styles), Style(bold=True), Style(dim=True), Style(bold=True), colours
        )
    bg = Color.parse(bg_text)
    light = not theme.dark
    fg = readable(Color.parse(fg_text), bg, TEXT_CONTRAST)
    colours = {c: readable(Color.parse(h[light]), bg).hex for c, h in _HUES.items()}
    match = readable(Color.parse(_MATCH[light]), bg)
    styles = _styles(colours, (bg.hex, fg.hex), (_ink(match), match.hex))
    muted = readable(fg.blend(bg, 0.4), bg, TEXT_CONTRAST)
    return Palette(
        theme.name,
        tuple(styles),
        Style(color=fg.hex, bold=True),
        Style(color=muted.hex),
        Style(color=fg.hex, bold=True),
        colours,
        bg,
    )
