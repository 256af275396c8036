"""echo-view: predict, inspect and validate the step time of distributed training jobs."""

__version__ = "0.1.0"
