"""The report as its public JSON document (hangdoc/report-v1, see docs/report-schema.md)."""
from __future__ import annotations

import json
from typing import TextIO

from hangdoc.model import Report
from hangdoc.render.escape import redact_tree
from hangdoc.base.serde import to_dict


def report_json(report: Report) -> str:
    return json.dumps(redact_tree(to_dict(report)), indent=2)


def render_json(report: Report, out: TextIO) -> None:
    out.write(report_json(report) + "\n")
