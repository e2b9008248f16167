"""A capture made into a bundle: `watch --once`, and the one place every bundle is built."""
from __future__ import annotations

import dataclasses
import time

from hangdoc import __version__
from hangdoc.analyze.diagnose import node_digest as diagnose_node
from hangdoc.collect.datalists import copy_data_lists
from hangdoc.collect.discover import find_job
from hangdoc.collect.host import host_facts
from hangdoc.collect.logs import log_sources, read_tails
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.collect.sources import read_sources
from hangdoc.live.options import WatchOptions
from hangdoc.live.probes import engine_name, require_stacks
from hangdoc.model import BUNDLE_SCHEMA, Bundle, Host, Job, NodeDigest, Options, Snapshot


def snapshot_once(pid: int, probes: Probes, options: WatchOptions = WatchOptions()) -> Bundle:
    """Find the job `pid` belongs to and capture it once, completely."""
    job = find_job(pid, probes.procfs, single=options.single)
    snapshot, job = capture(job, probes, native=options.native, nonblocking=options.nonblocking)
    require_stacks(snapshot, job)
    record = dataclasses.replace(options.record(engine_name(probes.pyspy)), interval_s=None, hang_after_s=None)
    bundle = make_bundle(job, (snapshot,), probes.procfs, record,
                         logs=read_tails(log_sources(job, probes.procfs.root)))
    return dataclasses.replace(bundle, data_lists=copy_data_lists(job, probes.procfs.root))


def make_bundle(job: Job, samples: tuple[Snapshot, ...], procfs: ProcFS, options: Options,
                logs: tuple = (), exit_code: int | None = None, host: Host | None = None) -> Bundle:
    """The one place a bundle is built from a capture: `watch --once`, `watch`, `run`.
    `host`: the facts read already (a watch reads them once, not every round)."""
    return Bundle(
        schema=BUNDLE_SCHEMA,
        hangdoc_version=__version__,
        created=time.time(),
        host=host or host_facts(job, procfs),
        job=job,
        samples=samples,
        logs=logs,
        options=options,
        exit_code=exit_code,
        sources=read_sources(job, samples, procfs.root),
    )


def node_digest(bundle: Bundle) -> NodeDigest | None:
    """The digest to save beside a capture nobody has judged yet (`watch --once`). The evidence
    matters more than the shortcut: when the analysis fails, the bundle is saved without it (a
    merge then reads the samples)."""
    try:
        return diagnose_node(bundle) if bundle.samples else None
    except Exception:   # noqa: BLE001 - never lose a capture to a bug in the analysis
        return None
