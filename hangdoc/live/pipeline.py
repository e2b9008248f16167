"""The whole of hangdoc in a few functions: collect -> snapshot -> analyse -> render.

Commands call these; these call the collectors, the analysis and the rules.
"""
from __future__ import annotations

import dataclasses
import time

from hangdoc import __version__
from hangdoc.collect.datalists import copy_data_lists
from hangdoc.collect.discover import find_job
from hangdoc.collect.logs import log_sources, read_tails
from hangdoc.collect.host import host_facts
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.collect.stacks import PySpy, find_py_spy
from hangdoc.base.errors import PtraceDenied, PyStackMissing, PySpyMissing
from hangdoc.model import BUNDLE_SCHEMA, Bundle, Job, Options, Role, Snapshot


def make_probes(py_spy: str | None = None, gpu: bool = True, proc_root: str = "/proc",
                timeout_s: float = 5.0, engine: str = "auto") -> Probes:
    """The real probes: /proc, a stack engine, NVML when asked for.

    `engine`: "py-spy" (found, or the binary named), "pystack" (in-process, the fallback),
    "auto": py-spy when it is installed, else pystack when that is."""
    probes = Probes(procfs=ProcFS(proc_root), pyspy=stack_engine(engine, py_spy, timeout_s))
    if gpu:
        from hangdoc.collect.gpu import open_nvml

        probes.gpu = open_nvml().sample
    return probes


def stack_engine(engine: str, py_spy: str | None = None, timeout_s: float = 5.0):
    from hangdoc.collect import pystack_engine

    if engine != "pystack":
        try:
            return PySpy(find_py_spy(py_spy), timeout_s=timeout_s)
        except PySpyMissing:
            if engine != "auto" or py_spy or not pystack_engine.available():
                raise
    if not pystack_engine.available():
        raise PyStackMissing()
    return pystack_engine.PyStack()


def engine_name(reader) -> str:
    """What a bundle's options record of the stack engine."""
    return getattr(reader, "name", "py-spy")


def require_stacks(snapshot: Snapshot, job: Job) -> None:
    """Every stack refused for lack of ptrace rights: no diagnosis is possible, say how to fix it."""
    ranks = {p.pid for p in job.by_role(Role.RANK)}
    denied = [s for s in snapshot.processes if s.pid in ranks and s.stack is None
              and any("ptrace" in e.lower() or "permission denied" in e.lower()
                      or "operation not permitted" in e.lower() for e in s.errors)]
    if ranks and len(denied) == len(ranks):
        raise PtraceDenied(denied[0].pid, denied[0].errors[-1].split(": ", 2)[-1][:120])


def snapshot_once(pid: int, probes: Probes, *, single: bool = False, native: bool = False,
                  nonblocking: bool = False) -> Bundle:
    """Find the job `pid` belongs to and capture it once, completely."""
    job = find_job(pid, probes.procfs, single=single)
    snapshot, job = capture(job, probes, native=native, nonblocking=nonblocking)
    require_stacks(snapshot, job)
    options = Options(native=native, nonblocking=nonblocking, engine=engine_name(probes.pyspy))
    bundle = make_bundle(job, (snapshot,), probes.procfs, options,
                         logs=read_tails(log_sources(job, probes.procfs.root)))
    return dataclasses.replace(bundle, data_lists=copy_data_lists(job, probes.procfs.root))


def report_from_files(paths, hang_after: float | None = None, records: tuple = (), errors: tuple = ()):
    """Load saved bundles and diagnose them: (bundle, report). Several files are one job's nodes:
    merged whole up to FOLD_ABOVE_RANKS ranks, diagnosed by class beyond (`hangdoc/live/fold.py`).
    `records`, `errors`: Flight Recorder dumps given beside the bundles, and the refused ones."""
    from hangdoc.report import build_report, report_of
    from hangdoc.bundle.files import bundle_files, load_bundles
    from hangdoc.live.fold import FOLD_ABOVE_RANKS, diagnose_by_class, read_node

    files = bundle_files(paths)
    if len(files) > 1:
        nodes = [read_node(f) for f in files]
        if sum(len(n.digest.ranks) for n in nodes) > FOLD_ABOVE_RANKS:
            bundle, diagnosis = diagnose_by_class(nodes, hang_after, records)
            return dataclasses.replace(bundle, flight_errors=bundle.flight_errors + errors), report_of(bundle, diagnosis)
    bundle = load_bundles(files)
    if records or errors:
        bundle = dataclasses.replace(bundle, flight_records=bundle.flight_records + records,
                                     flight_errors=bundle.flight_errors + errors)
    return bundle, build_report(bundle, hang_after)


def make_bundle(job: Job, samples: tuple[Snapshot, ...], procfs: ProcFS, options: Options,
                logs: tuple = (), exit_code: int | None = None) -> Bundle:
    """The one place a bundle is built from a capture: `watch --once`, `watch`, `run`."""
    return Bundle(
        schema=BUNDLE_SCHEMA,
        hangdoc_version=__version__,
        created=time.time(),
        host=host_facts(job, procfs),
        job=job,
        samples=samples,
        logs=logs,
        options=options,
        exit_code=exit_code,
    )


def report_inputs(paths, hang_after: float | None = None):
    """Bundles and FR dumps as `hangdoc report` takes them: (bundle, report). Dumps beside bundles
    join the bundle's evidence; dumps alone make a bundle of their own, judged on them."""
    from hangdoc.analyze.flight import bundle_from_dumps, verdict_from_dumps
    from hangdoc.collect.flight_recorder import load_dumps, split_inputs
    from hangdoc.base.errors import BadBundle
    from hangdoc.report import build_report

    bundle_paths, dump_paths = split_inputs(paths)
    records, errors = load_dumps(dump_paths)
    if dump_paths and not records:
        raise BadBundle(errors[0] if errors else f"no Flight Recorder dump could be read in {dump_paths[0]}")
    if bundle_paths:
        return report_from_files(bundle_paths, hang_after, tuple(records), tuple(errors))
    bundle = bundle_from_dumps(records, errors)
    return bundle, verdict_from_dumps(build_report(bundle, hang_after))
