"""`hangdoc demo [SCENARIO]`: watch a real torchrun job from the zoo freeze and get diagnosed."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from hangdoc.cli import app
from hangdoc.cli.common import emit_report, hang_after_option, interval_option, record_option, report_format_option
from hangdoc.base.defaults import DEMO_INTERVAL_S
from hangdoc.base.errors import EXIT_FINDINGS, EXIT_OK, HangdocError
from hangdoc.render.formats import OutputFormat


@app.command()
def demo(
    scenario: str = typer.Argument("bz2-shards", help="A scenario from `hangdoc demo --list`."),
    list_: bool = typer.Option(False, "--list", help="List the scenarios and exit."),
    hang_after: Optional[float] = hang_after_option(),
    interval: float = interval_option(DEMO_INTERVAL_S),
    fmt: OutputFormat = report_format_option(),
    record: Optional[Path] = record_option(),
) -> None:
    """Run a scenario under watch (threshold learned, or --hang-after), show the live view and the report.

    Exits 0 when the diagnosis matches the scenario's ground truth, 1 when it does not (the watch's
    recording is then kept and named, for `hangdoc replay`), 2 when this Python has no torch to run
    the job with.
    """
    from hangdoc.scenarios import SCENARIOS

    if list_:
        for s in SCENARIOS.values():
            truth = f"{s.verdict}, rank {','.join(map(str, s.culprit_ranks))}" if s.culprit_ranks else s.verdict
            print(f"{s.name:<18} {truth:<12} {s.expected_rule or '-':<22} {s.description}")
        raise typer.Exit(EXIT_OK)
    if scenario not in SCENARIOS:
        raise HangdocError(f"no scenario {scenario!r}; `hangdoc demo --list` shows them")
    from hangdoc.render.live import LiveView
    from hangdoc.scenarios.evaluate import evaluate
    from hangdoc.scenarios.launch import torch_missing

    missing = torch_missing()
    if missing is not None:
        raise HangdocError(f"hangdoc demo runs a real torchrun job and needs torch in this Python ({sys.executable}: "
                           f"{missing}); install hangdoc with its [torch] extra (see the README's install section). "
                           "Watching your own jobs needs no torch here.")
    chosen = SCENARIOS[scenario]
    print(f"hangdoc demo: {chosen.name}: {chosen.description}", file=sys.stderr)
    print("hangdoc demo: starting a real torchrun job (2 ranks, gloo); "
          + (f"hang-after {hang_after:g} s" if hang_after is not None else "hang threshold learned from its steps"),
          file=sys.stderr)
    import shutil
    import tempfile

    kept = record is not None
    record = record if kept else Path(tempfile.mkdtemp(prefix="hangdoc-demo-")) / "recording"
    view = LiveView(sys.stderr, live=True)
    result = None
    try:
        result = evaluate(chosen, hang_after=hang_after, interval=interval, on_sample=view.update, stop_when_slow=True,
                          record=record)
    finally:
        view.close()
        if not kept and (result is None or result.localised):     # a miss keeps its rounds to replay
            shutil.rmtree(record.parent, ignore_errors=True)
    emit_report(result.report, fmt)
    truth = f"{chosen.truth(hang_after)}, culprits {list(chosen.culprit_ranks)}, rule {chosen.expected_rule}"
    if result.localised:
        when = f" {result.seconds_to_verdict:.1f} s after the fault began" if result.seconds_to_verdict else ""
        print(f"hangdoc demo: diagnosis matches the ground truth ({truth}){when}; the job was ended and its files removed",
              file=sys.stderr)
        raise typer.Exit(EXIT_OK)
    print(f"hangdoc demo: diagnosis differs from the ground truth ({truth}): got {result.verdict}, "
          f"culprits {list(result.culprits)}, rules {list(result.rules)}; the watch's rounds are kept: "
          f"hangdoc replay {record}", file=sys.stderr)
    raise typer.Exit(EXIT_FINDINGS)
