"""The verdict as JUnit XML, which every CI system shows as a test result."""
from __future__ import annotations

import time
from pathlib import Path
from xml.etree import ElementTree as ET

from hangdoc.model import Report, Verdict
from hangdoc.base.outputs import write_output
from hangdoc.base.redact import redact_cmdline
from hangdoc.render.escape import xml
from hangdoc.render.layout import layout


def junit_xml(report: Report, cmd: list[str], fail_on_slow: bool = False) -> str:
    """A hang or a crash fails the test case; a slow job only with `fail_on_slow` (else its
    findings are the case's output, a warning); a run stopped by Ctrl-C or SIGTERM is an error."""
    failed = report.failed or (fail_on_slow and report.slow is not None)
    stopped = report.verdict == Verdict.INTERRUPTED
    suite = ET.Element("testsuite", name="hangdoc", tests="1", failures=str(int(failed)), errors=str(int(stopped)),
                       timestamp=time.strftime("%Y-%m-%dT%H:%M:%S"))
    case = ET.SubElement(suite, "testcase", classname="hangdoc.run", name=xml(" ".join(redact_cmdline(cmd)))[:200])
    doc = layout(report)
    body = [doc.headline, *doc.cause, *doc.missing] if failed else [doc.headline, *doc.notes[:2]]
    for f in doc.findings:
        body += [f"[{f.severity.value}] {f.rule}: {f.title}", *("    " + e for e in f.evidence), f"    fix: {f.fix}"]
    if failed or stopped:
        ET.SubElement(case, "failure" if failed else "error", message=xml(doc.headline),
                      type=report.verdict).text = xml("\n".join(body))
    else:
        ET.SubElement(case, "system-out").text = xml("\n".join(body))
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)


def write_junit(path: Path, report: Report, cmd: list[str], fail_on_slow: bool = False) -> None:
    """The result as a named output (hangdoc/base/outputs.py): a regular file, 0600, written whole."""
    write_output(path, junit_xml(report, cmd, fail_on_slow) + "\n", "--junit")
