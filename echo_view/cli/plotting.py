"""What every ``--plot OUT`` shares: the format from the file name (checked before any work),
matplotlib imported only when a plot is drawn, and the figure written atomically."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from echo_view.errors import UsageError
from echo_view.formats import atomic_output

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_FORMATS = ("png", "svg", "pdf")


def plot_format(path: Path) -> str:
    """``png``, ``svg`` or ``pdf`` from ``path``'s suffix, else a UsageError."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in PLOT_FORMATS:
        raise UsageError(
            f"--plot: cannot tell the plot format from {path.name!r}",
            hint=f"use one of: {', '.join('.' + f for f in PLOT_FORMATS)}",
        )
    return fmt


def new_figure(**kwargs: Any) -> Figure:
    """A matplotlib Figure on the Agg backend; a UsageError when matplotlib is missing."""
    # With a home folder it cannot write, matplotlib logs two lines about the temporary
    # folder it takes instead (which works): noise on stderr for the user.
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(
            "--plot needs matplotlib", hint="install the plot extra: pip install 'echo-view[plot]'"
        ) from None
    return Figure(**kwargs)


def save_figure(fig: Figure, path: Path) -> None:
    """Write ``fig`` to ``path`` in the format its suffix names, atomically."""
    fmt = plot_format(path)
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=fmt)
