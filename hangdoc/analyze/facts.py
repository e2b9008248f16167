"""What every format prints beside the findings, read once from the bundle so that no renderer
has to: a crash's own story, the ranks without a stack and why, the ranks' stack classes, their
GPUs over the last samples, the Flight Recorder settings and the job's past at attach."""
from __future__ import annotations

from hangdoc.analyze.classes import stack_classes, stack_tree
from hangdoc.analyze.departures import departure_of
from hangdoc.analyze.flight import flight_summary
from hangdoc.analyze.logs import rank_exception
from hangdoc.analyze.restarts import restart_cause, restarts_of
from hangdoc.base.words import rank_label
from hangdoc.analyze.passes import file_reads
from hangdoc.analyze.timeline import Timeline
from hangdoc.model import BeforeAttach, Bundle, DataPace, GpuTrend, Role, Slowness, StackClass

TREND_SAMPLES = 12     # the live view's sparklines


def stackless_ranks(bundle: Bundle) -> list[tuple[int | None, int, str]]:
    """(rank, pid, why) for each live rank without a stack in the last sample, as the bundle recorded it."""
    out = []
    last = bundle.last
    for rank in bundle.job.ranks:
        sample = last.sample_of(rank.pid)
        if sample is not None and sample.alive and sample.stack is None:
            out.append((rank.rank, rank.node_pid, sample.stack_failure or "py-spy gave nothing"))
    return out


def missing_stacks(bundle: Bundle | None, limit: int = 8) -> tuple[str, ...]:
    """Why ranks have no stack: a rank named culprit "at no stack" must say why (ptrace refused
    by another tracer, a py-spy that does not run here, ...)."""
    if bundle is None or not bundle.samples:
        return ()
    lines = [f"rank {rank_label(rank)} (pid {pid}) has no stack: {why}" for rank, pid, why in stackless_ranks(bundle)]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more ranks without a stack"]
    return tuple(lines)


def crash_story(bundle: Bundle, culprits: tuple[int, ...], limit: int = 2) -> tuple[str, ...]:
    """For a crash: the exception the culprit rank (or its worker) printed, quoted from the job's
    output, and where it was raised; for a job whose restarts are used up, the last start's failure
    and the earlier starts'; for a rank that left first, its leaving and the errors it caused. The
    root cause is there, not in the stacks (the report prints it where no rule names the cause)."""
    restarts = restarts_of(bundle)
    if restarts is not None and restarts.used_up:
        return restart_cause(bundle, restarts)
    left = departure_of(bundle)
    if left is not None and not left.own_error and left.rank in culprits:
        lines = [left.summary]
        for error in left.named_by[:limit]:
            lines.append(f"  rank {error.rank}: {error.line}: rank {left.rank}'s address (its socket)")
        return tuple(lines)
    lines = []
    for rank in (culprits or (None,))[:limit]:
        raised = rank_exception(bundle.logs, rank)
        if raised is None:
            continue
        who = f"rank {rank}" if rank is not None else "the job"
        lines.append(f"{who} raised {' -> '.join(m[:300] for m in raised.messages)}")
        if raised.where:
            lines.append(f"  at {raised.where}" + (f": {raised.code[:200]}" if raised.code else ""))
    return tuple(lines)


def stacks(bundle: Bundle, members: dict[int, tuple[int, ...]] | None) -> tuple[tuple[str, ...], tuple[StackClass, ...]]:
    """The main-thread stacks of the last sample: the folded tree and the classes (frame labels only:
    a report never carries a frame's locals). `members`: rank -> the ranks its row stands for."""
    if not bundle.samples:
        return (), ()
    classes = stack_classes(bundle, members)
    tree = stack_tree(bundle, members)
    return tuple(tree), tuple(StackClass(c.ranks, tuple(f.label for f in c.frames)) for c in classes)


def gpu_trend(bundle: Bundle, pid: int, width: int = TREND_SAMPLES) -> GpuTrend | None:
    util, power, limit = [], [], 0.0
    for snapshot in list(bundle.samples)[-width:]:
        device = snapshot.gpu.device_of(pid) if snapshot.gpu.available else None
        util.append(device.utilization_pct if device else None)
        power.append(device.power_w if device else None)
        if device and device.power_limit_w:
            limit = max(limit, device.power_limit_w)
    if all(v is None for v in util):
        return None
    return GpuTrend(tuple(util), tuple(power), limit or None)


def flight(bundle: Bundle):
    return flight_summary(bundle.flight_config, len(bundle.flight_records))


def before_attach(bundle: Bundle, diagnosis) -> BeforeAttach | None:
    """The job's past as the system knew it at the first sample: the wait already under way (the
    diagnosis's `before`), and the log the job wrote last. None when neither is known."""
    first = bundle.samples[0].time
    log = max((t for t in bundle.logs if t.mtime is not None and t.mtime <= first + 1.0),
              key=lambda t: t.mtime, default=None)
    log_quiet = round(max(0.0, first - log.mtime), 1) if log is not None else None
    before = diagnosis.before
    if before is None and log is None:
        return None
    loop = _loop_position(bundle, before.rank if before is not None else None)
    if before is None:
        return BeforeAttach(log=log.source, log_quiet_s=log_quiet, **loop)
    loop.pop("rank", None)      # the waiting rank's own loop (or the first rank's, said as such)
    return BeforeAttach(waited_s=round(first - before.since, 1), rank=before.rank, wait=before.wait,
                        others_asleep=before.others_asleep, decided=diagnosis.from_past,
                        log=log.source if log else None, log_quiet_s=log_quiet, told_by=before.told_by, **loop)


# Names a training loop's step counter goes by, most telling first.
_STEP_NAMES = ("global_step", "step", "iteration", "iter", "batch_idx", "batch_index", "it", "i")


def _loop_position(bundle: Bundle, rank: int | None) -> dict:
    """The step counter of a rank's loop at the first sample and the process's age then: how far
    the job had got before hangdoc arrived (the mean step time is at most age / counter)."""
    info = next((p for p in bundle.job.ranks if p.rank == rank), None) or next(iter(bundle.job.ranks), None)
    sample = bundle.samples[0].sample_of(info.pid) if info is not None else None
    main = sample.stack.main if sample is not None and sample.stack is not None else None
    if main is None or main.loop is None or not info.start_time:
        return {}
    counters = {name: value for frame in main.loop.frames for name, value in frame.counters}
    name = next((n for n in _STEP_NAMES if counters.get(n, 0) > 0), None)
    age = bundle.samples[0].time - info.start_time
    if name is None or age <= 0:
        return {}
    return {"loop_counter": name, "loop_value": counters[name], "loop_age_s": round(age, 1), "rank": info.rank}


def slowness(call, bundle: Bundle | None = None, lines: dict[int, Timeline] | None = None) -> Slowness | None:
    if call is None:
        return None
    pace = data_pace(bundle, lines, call.stragglers) if call.waited_s is not None and bundle and lines else None
    return Slowness(call.kind, call.stragglers, call.others_wait, call.straggler_wait, call.speedup,
                    call.doing, call.samples, call.at, call.waited_s, call.next_batch_s, pace)


def data_pace(bundle: Bundle, lines: dict[int, Timeline], ranks: tuple[int, ...]) -> DataPace | None:
    """The pace of the file the stragglers' live workers read forward most (`analyze/passes.py`)."""
    best, converging = None, False
    for info in bundle.job.ranks:
        if info.rank not in ranks:
            continue
        for worker in bundle.job.children_of(info.pid):
            line = lines.get(worker.pid)
            if worker.role is not Role.WORKER or line is None:
                continue
            for (fd, path), read in file_reads(line)[0].items():
                converging = converging or read.converging
                if read.forward_bytes and (best is None or read.forward_bytes > best[2].forward_bytes):
                    best = (info, worker, read)
    if best is None:
        return None
    info, worker, read = best
    sample = bundle.last.sample_of(worker.pid)
    opened = sample.proc.open_files if sample is not None and sample.proc is not None else ()
    size = next((f.size for f in opened if f.fd == read.fd and f.path == read.path), None)
    return DataPace(info.rank, worker.worker_index, worker.node_pid, read.path, read.rate, read.rewinds,
                    read.furthest, size, converging)
