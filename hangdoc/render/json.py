"""The report as its public JSON document (hangdoc/report-v1, see docs/report-schema.md)."""
from __future__ import annotations

import json
from typing import TextIO

import msgspec

from hangdoc.model import Report
from hangdoc.render.escape import redact_tree
from hangdoc.base.serde import to_dict


def report_json(report: Report) -> str:
    tree = redact_tree(to_dict(report))
    # json.dumps with an indent encodes in Python (a class of a million ranks lists them: half a
    # second); encoded in C and laid out by msgspec, the document is the same, byte for byte. What
    # msgspec does not read as JSON (a NaN) is laid out by json itself.
    try:
        return msgspec.json.format(json.dumps(tree).encode(), indent=2).decode()
    except msgspec.DecodeError:
        return json.dumps(tree, indent=2)


def render_json(report: Report, out: TextIO) -> None:
    out.write(report_json(report) + "\n")
