"""Trace validation: rules with stable codes (EV1xx..EV7xx) over raw Chrome/Perfetto JSON events
and over whole jobs, a report that counts findings, and repairs for what can be repaired.

The package knows no file format reader: the CLI opens files and feeds event chunks to a
:class:`FileValidator`, then hands the per-rank summaries to :func:`check_job`.
"""

from echo_view.validate.container import ContainerFacts, JsonErrorInfo, line_column
from echo_view.validate.crossrank import check_job
from echo_view.validate.engine import FileValidator, validate_document, validate_job
from echo_view.validate.events import RawEvent, decode_events
from echo_view.validate.findings import (
    CODES,
    FAMILIES,
    Code,
    FileFacts,
    Finding,
    Location,
    Report,
    Selection,
    Severity,
)
from echo_view.validate.pftrace import check_pftrace
from echo_view.validate.summary import RankSummary, summaries_from_job

__all__ = [
    "CODES",
    "FAMILIES",
    "Code",
    "ContainerFacts",
    "FileFacts",
    "FileValidator",
    "Finding",
    "JsonErrorInfo",
    "Location",
    "RankSummary",
    "RawEvent",
    "Report",
    "Selection",
    "Severity",
    "check_job",
    "check_pftrace",
    "decode_events",
    "line_column",
    "summaries_from_job",
    "validate_document",
    "validate_job",
]
