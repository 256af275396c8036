"""File-format importers: each turns files of one format into model objects.

Importers see only ``echo_view.model``, ``echo_view.formats``, ``echo_view.errors`` and
``echo_view.units``; ``echo_view.loading.build_registry`` registers them.

- :mod:`importers.chrome_json` streams the event array of any Chrome / Perfetto / Kineto
  trace-event JSON file (``.json`` or gzip) in decoded chunks; the Kineto importer and the
  validator build on it.
- :mod:`importers.kineto` reads PyTorch profiler (Kineto) traces, one file per rank, into a
  :class:`~echo_view.model.job.Job`.
"""
