"""Write a CheckResult as JSON: `{schema, command, findings, facts}` via serde.to_dict."""
from __future__ import annotations

import json
from typing import TextIO

from hangdoc.base.serde import to_dict
from hangdoc.check.model import CheckResult


def render_json(result: CheckResult, out: TextIO) -> None:
    json.dump(to_dict(result), out, indent=2)
    out.write("\n")
