"""echo-view: predict, inspect and validate the step time of distributed training jobs.

``import echo_view as ev`` then ``ev.load``, ``ev.summary``, ``ev.simulate``, ``ev.diff``
(:mod:`echo_view.api`, docs/api.md). They are imported on first use, so importing the package
loads neither numpy nor pandas and the command line starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Diff", "Job", "SimResult", "__version__", "diff", "load", "simulate", "summary"]

if TYPE_CHECKING:
    from echo_view.api import Diff, Job, SimResult, diff, load, simulate, summary


def __getattr__(name: str) -> Any:
    if name in __all__:
        from echo_view import api

        return getattr(api, name)
    raise AttributeError(f"module 'echo_view' has no attribute {name!r}")
