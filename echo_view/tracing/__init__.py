"""Ex-situ tracing: build one rank's share of a Megatron-style model in torch on the ``meta``
device, run one micro-batch forward and backward under a dispatch recorder, and produce a
:class:`~echo_view.model.graph.TracedGraph`. Needs the optional ``torch`` extra; nothing else
in echo-view imports this package at module load.
"""
