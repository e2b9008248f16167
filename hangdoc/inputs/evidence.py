"""What `hangdoc report` reads: saved bundles (one node's, or many merged or folded by class)
and Flight Recorder dumps, beside the bundles or alone."""
from __future__ import annotations

import dataclasses

from hangdoc import __version__
from hangdoc.base.errors import BadBundle
from hangdoc.base.heap import no_cycle_walks
from hangdoc.bundle.files import bundle_files, load_bundles
from hangdoc.inputs.flight_dumps import load_dumps, split_inputs
from hangdoc.inputs.fold import FOLD_ABOVE_RANKS, Shared, diagnose_by_class, read_node
from hangdoc.model import BUNDLE_SCHEMA, Bundle, Ending, GpuState, Host, Job, Snapshot
from hangdoc.report.judge import End, Judgement, judge


def report_inputs(paths, hang_after: float | None = None) -> tuple[Bundle, Judgement]:
    """Bundles and FR dumps as `hangdoc report` takes them: (bundle, judgement). Dumps beside bundles
    join the bundle's evidence; dumps alone make a bundle of their own, judged on them."""
    bundle_paths, dump_paths = split_inputs(paths)
    records, errors = load_dumps(dump_paths)
    if bundle_paths:      # a refused dump beside a bundle is a line of its `flight_errors`; the report goes on
        return report_from_files(bundle_paths, hang_after, tuple(records), tuple(errors))
    if not records:
        raise BadBundle(errors[0] if errors else f"no Flight Recorder dump could be read in {dump_paths[0]}")
    bundle = bundle_from_dumps(records, errors)
    return bundle, judge(bundle, End(Ending.DUMPS_ONLY), hang_after=hang_after)


def report_from_files(paths, hang_after: float | None = None, records: tuple = (),
                      errors: tuple = ()) -> tuple[Bundle, Judgement]:
    """Load saved bundles and judge them: (bundle, judgement). Several files are one job's nodes:
    merged whole up to FOLD_ABOVE_RANKS ranks, diagnosed by class beyond (`hangdoc/inputs/fold.py`).
    `records`, `errors`: Flight Recorder dumps given beside the bundles, and the refused ones."""
    files = bundle_files(paths)
    if len(files) > 1:
        shared = Shared()
        nodes = [read_node(f, shared) for f in files]
        if sum(len(n.digest.ranks) for n in nodes) > FOLD_ABOVE_RANKS:
            with no_cycle_walks():       # a million ranks folded: lists of them, no cycles
                bundle, diagnosis = diagnose_by_class(nodes, hang_after, records)
                bundle = dataclasses.replace(bundle, flight_errors=bundle.flight_errors + errors)
                return bundle, judge(bundle, diagnosis=diagnosis)
    bundle = load_bundles(files)
    if records or errors:
        bundle = dataclasses.replace(bundle, flight_records=bundle.flight_records + records,
                                     flight_errors=bundle.flight_errors + errors)
    return bundle, judge(bundle, hang_after=hang_after)


def bundle_from_dumps(records, errors=()) -> Bundle:
    """A bundle holding only FR dumps (no live capture): what `hangdoc report DUMPS...` judges."""
    when = max((r.mtime or 0.0 for r in records), default=0.0)
    return Bundle(
        schema=BUNDLE_SCHEMA, hangdoc_version=__version__, created=when,
        host=Host(hostname="flight-recorder-dumps", arch="?", kernel="?", cpu_count=0,
                  python_version=None, torch_version=None),
        job=Job(run_id=None, master_addr=None, master_port=None, world_size=None, launcher_pid=None, processes=()),
        samples=(Snapshot(time=when, took_s=0.0, processes=(),
                          gpu=GpuState("unavailable", "no live capture: Flight Recorder dumps only")),),
        flight_records=tuple(records), flight_errors=tuple(errors),
    )
