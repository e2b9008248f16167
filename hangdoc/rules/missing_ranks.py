"""missing-ranks: ranks the job needs are not there.

- Never joined: ranks wait in process-group setup (`init_process_group`, the rendezvous, the
  TCPStore) for a rank that is elsewhere (a poll loop, a sleep, a download) or whose process is
  gone from its node: that rank is the culprit, even before any process group exists.
- Not captured: the bundle holds fewer ranks than the job's world size (nodes not captured).
"""
from __future__ import annotations

from hangdoc.analyze.diagnose import RankView
from hangdoc.base.parse import to_int
from hangdoc.base.words import rank_ranges, rank_set
from hangdoc.model import Finding, Frame, Job, ProcSample, Severity, Verdict
from hangdoc.model.capture import store_address
from hangdoc.rules.base import Context, Rule, finding
from hangdoc.rules.evidence import worker_lines
from hangdoc.rules.samples import frames_line, latest_frames, samples_of

FIX = ("Capture every node of the job at about the same moment and merge the bundles: "
       "`srun --overlap --jobid=$JOB --ntasks-per-node=1 hangdoc watch --job --once --out $DIR/<host>.json` "
       "(or kubectl exec / pdsh on each node; docs/cluster.md), then `hangdoc report $DIR`.")


def missing(job: Job) -> tuple[int, list[int], list[int] | None]:
    """(world size, ranks missing, node group ranks missing or None when the node count is unknown)."""
    ranks = job.ranks
    sizes = [job.world_size] + [p.world_size for p in ranks]
    world = max((s for s in sizes if s), default=0)
    present = {p.rank for p in ranks if p.rank is not None}
    if not world or not present:
        return world, [], None
    absent = [r for r in range(world) if r not in present]
    nodes = max((n for p in ranks if (n := to_int(p.env.get("GROUP_WORLD_SIZE")))), default=None)
    groups = {p.group_rank for p in ranks if p.group_rank is not None}
    absent_nodes = [g for g in range(nodes) if g not in groups] if nodes and groups else None
    return world, absent, absent_nodes


def check(ctx: Context) -> list[Finding]:
    return not_joined(ctx) + not_captured(ctx)


# --- never joined: the others wait in process-group setup ---------------------------------------

_NETWORK = ("/socket.py", "/ssl.py", "/http/", "urllib", "/requests/", "huggingface_hub/", "fsspec/", "boto",
            "/ftplib.py")
SETUP_FIX = ("Every rank must call {call}; find what rank {rank} does before it (the line above) and make it "
             "finish or fail. Work before {call} has no watchdog: do it before the job starts, or after "
             "{call} with one rank doing it and the others in `dist.barrier()`; pass "
             "`init_process_group(timeout=timedelta(minutes=5))` so a rank that never comes fails the job in "
             "minutes, not 30.")
LOCK_FIX = ("Rank {rank} waits for a lock that nobody releases; a lock file left by an earlier run that was "
            "killed is the usual cause. Remove the stale lock, and give the lock a timeout so a stale one "
            "fails loudly instead of hanging every rank: `FileLock(path, timeout=300)`, or a retry loop "
            "that gives up after N tries (check the lock's age or its owner's pid). Take such locks after "
            "{call}, with the others waiting in `dist.barrier()`.")
POLL_FIX = ("Rank {rank} polls for something that never comes, with no deadline. Give the loop one (raise after "
            "N tries or seconds, naming what it waited for) and find why the thing never appears; do such "
            "waits after {call}, with the others in `dist.barrier()`, or on every rank.")
DOWNLOAD_FIX = ("Rank {rank} downloads (or reads from the network) before {call} while the others wait. "
                "Download before the job starts (or on every rank, into a per-node cache), or call {call} "
                "first and let one rank download while the others wait in `dist.barrier()`; give the "
                "download a timeout.")
ABSENT_FIX = ("No process of {ranks} runs, so {call} can never complete. Find why it is gone or never started: "
              "the launcher's output (`torchrun --tee 3 --log-dir DIR`), `dmesg` for the OOM killer, the "
              "node's scheduler log; torchrun restarts the whole group only when a worker exits while it "
              "watches.")


def not_joined(ctx: Context) -> list[Finding]:
    """The ranks the others wait for in process-group setup: one finding each present culprit
    (where it stands instead), one for the culprits that have no process."""
    d = ctx.diagnosis
    if d.verdict not in (Verdict.HANG, Verdict.SUSPECT) or d.mismatch or not d.culprits:
        return []
    joined = [v for v in d.ranks if v.joining is not None and v.exited_at is None]
    if not joined:
        return []
    now = d.decided_at
    call = ctx.setup_call(joined[0].joining)
    waiting = sorted(r for v in joined for r in v.ranks)
    world = max([ctx.bundle.job.world_size or 0] + [v.info.world_size or 0 for v in d.ranks]) or None
    severity = Severity.CRITICAL if d.verdict == Verdict.HANG else Severity.WARNING
    evidence = [_waiting_line(ctx, joined, call, world, now)]
    findings = []
    for view in ctx.culprit_views():
        if view.joining is not None:
            findings += _off_store(ctx, view, joined, evidence, severity)
            continue
        own = _own_line(ctx, view)
        where = own.label if own is not None else "a line hangdoc could not read"
        title = (f"Rank {view.info.rank} never reached {call}: {rank_set(waiting)} {_wait(waiting)} there for it "
                 f"while it is at {where}")
        lines = evidence + [_doing_line(ctx, view, where, now)]
        stack = frames_line(ctx.bundle, view.info.pid)
        if stack:
            lines.append(f"rank {view.info.rank} stack: {stack}")
        lines.extend(worker_lines(view, ctx))
        fix = _fix_for(ctx, view).format(rank=view.info.rank, call=call)
        findings.append(finding(RULE, [view.info.rank], title, lines, fix, severity=severity))
    present = {r for v in d.ranks for r in v.ranks}
    absent = [r for r in d.culprits if r not in present]
    if absent:
        verb, it = ("has", "it") if len(absent) == 1 else ("have", "them")
        title = (f"{rank_set(absent).capitalize()} {verb} no process: {rank_set(waiting)} {_wait(waiting)} "
                 f"for {it} in {call}")
        hosts = sorted({v.info.host or ctx.bundle.host.hostname for v in joined})
        lines = evidence + [f"no process of {rank_set(absent)} was found on {', '.join(hosts[:4])}, which runs "
                            f"{rank_set(sorted(present))} of the job's {world or '?'}"]
        fix = ABSENT_FIX.format(ranks=rank_set(absent), call=call)
        findings.append(finding(RULE, absent, title, lines, fix, severity=severity))
    return findings


def _off_store(ctx: Context, view: RankView, joined: list[RankView], evidence: list[str],
               severity: Severity) -> list[Finding]:
    """A rank in setup too, but never connected to the store the others wait on: pointed elsewhere."""
    store = store_address(view.info)
    reached = [r for v in joined if v is not view for r in v.ranks]
    if store is None or not reached:
        return []
    start = _start_of(view)
    call = ctx.setup_call(view.joining)
    title = (f"Rank {view.info.rank}{start} never reached the store at {store}: {rank_set(reached)} "
             f"{_wait(reached)} in {call} on it for rank {view.info.rank}, which waits in {call} too, elsewhere")
    lines = evidence + [
        f"{rank_set(reached)} {'holds' if len(reached) == 1 else 'hold'} a connection to the store at {store} "
        f"(MASTER_ADDR:MASTER_PORT in the ranks' environment; their sockets, read from /proc)",
        f"rank {view.info.rank} (pid {view.info.node_pid}) holds none: it waits in {call} for another address "
        f"(an init_method or MASTER_ADDR / MASTER_PORT of its own, a stale address)"]
    stack = frames_line(ctx.bundle, view.info.pid)
    if stack:
        lines.append(f"rank {view.info.rank} stack: {stack}")
    fix = (f"Every rank must reach the same store: find where rank {view.info.rank} sets its address (an "
           "`init_method=\"tcp://...\"`, a MASTER_ADDR / MASTER_PORT set in the script or its config) and let "
           f"the launcher's environment decide it; give {call} a timeout so a rank that cannot reach the store "
           "fails the job in minutes, not 30.")
    return [finding(RULE, [view.info.rank], title, lines, fix, severity=severity)]


def _start_of(view: RankView) -> str:
    """" of restart 1": which start of a job its launcher restarted the rank belongs to."""
    generation = view.info.generation
    return f" of restart {generation}" if generation else ""


def _waiting_line(ctx: Context, joined: list[RankView], call: str, world: int | None, now: float) -> str:
    first = joined[0]
    setup = first.joining
    caller = _own_line(ctx, first)
    since = min(v.joining_since for v in joined if v.joining_since is not None)
    count = f"all {world}" if world else "all"
    waiting = sorted(r for v in joined for r in v.ranks)
    return (f"{rank_set(waiting)} {_wait(waiting)} in {call} "
            f"({setup.short_filename}:{setup.line}) for {now - since:.0f} s"
            + (f", called from {caller.label}" if caller is not None else "")
            + f": the process group forms only once {count} ranks have called it")


def _wait(ranks: list[int]) -> str:
    return "waits" if len(ranks) == 1 else "wait"


def _own_line(ctx: Context, view: RankView) -> Frame | None:
    """The job's own innermost line on the rank's main thread."""
    return next((f for f in latest_frames(ctx.bundle, view.info.pid) if f.is_job_code), None)


def _doing_line(ctx: Context, view: RankView, where: str, now: float) -> str:
    who = f"rank {view.info.rank} (pid {view.info.node_pid}) is at {where}"
    poll = view.poll
    if poll is not None:
        wait = ctx.parked_in(_last_sample(ctx, view)) or "a wait"
        return (f"{who}, in a poll or retry loop: asleep in {wait} between tries, its `{poll.counter}` went "
                f"{poll.tries[0]} -> {poll.tries[1]} in {now - poll.since:.0f} s without it leaving that line")
    doing = view.reading.state + (f" ({view.reading.detail})" if view.reading.detail else "")
    wait = ctx.parked_in(_last_sample(ctx, view))
    return f"{who}: {doing} for {now - view.state_since:.0f} s" + (f", asleep in {wait}" if wait else "")


def _last_sample(ctx: Context, view: RankView) -> ProcSample | None:
    seen = samples_of(ctx.bundle, view.info.pid)
    return seen[-1][1] if seen else None


def _fix_for(ctx: Context, view: RankView) -> str:
    frames = latest_frames(ctx.bundle, view.info.pid)
    own = [f for f in frames if f.is_job_code]
    if view.reading.detail == "file lock" or any("lock" in f.name.lower() for f in own) or (
            view.poll is not None and "lock" in view.poll.counter.lower()):
        return LOCK_FIX
    if (any(any(k in f.filename for k in _NETWORK) or "download" in f.name.lower() for f in frames)
            or ctx.parked_in(_last_sample(ctx, view)) == "a socket read"):
        return DOWNLOAD_FIX
    if view.poll is not None:
        return POLL_FIX
    return SETUP_FIX


# --- not captured: the bundle holds only some of the job's ranks ---------------------------------

def not_captured(ctx: Context) -> list[Finding]:
    job = ctx.bundle.job
    if job.single_process:
        return []
    census = ctx.diagnosis.census
    if census is None:
        world, absent, absent_nodes = missing(job)
        present = [p.rank for p in job.ranks if p.rank is not None]
        hosts = sorted({p.host or ctx.bundle.host.hostname for p in job.ranks})
        groups = sorted({p.group_rank for p in job.ranks if p.group_rank is not None})
    else:   # a job diagnosed by class: the bundle holds one node of each class, the census all
        present = list(census.ranks)
        world = max([job.world_size or 0, len(present)])
        absent = sorted(set(range(world)).difference(present))     # a million ranks: no loop of lookups
        if not absent:
            return []      # before the census reads its hosts and nodes: only a missing rank prints them
        hosts, groups = list(census.hosts), list(census.group_ranks)
        have_groups = set(groups)
        absent_nodes = ([g for g in range(census.nodes) if g not in have_groups]
                        if census.nodes and groups else None)
    if not absent:
        return []
    where = f" on {', '.join(hosts[:8])}{' ...' if len(hosts) > 8 else ''}"
    if groups:
        where += f" (node {rank_ranges(groups)})"
    nodes = f" (node {rank_ranges(absent_nodes)} not captured)" if absent_nodes else ""
    evidence = [f"{len(present)} of {world} ranks captured: {rank_set(present)}{where}",
                f"not in the bundle: {rank_set(absent)}{nodes}"]
    d = ctx.diagnosis
    verb = "is" if len(absent) == 1 else "are"
    title = f"{rank_set(absent).capitalize()} of {world} {verb} not in the bundle{nodes}"
    severity = Severity.INFO if d.verdict == Verdict.HEALTHY else Severity.WARNING
    joined = [v for v in d.ranks if v.joining is not None]
    if d.verdict == Verdict.HANG and not d.culprits and d.waiting:
        title += ": every rank here waits in a collective, so the culprit is on another node"
        evidence.append(f"{d.count(d.waiting)} of {d.count(d.ranks)} captured ranks wait in "
                        f"{d.waiting[0].reading.detail or 'a collective'}: the rank they wait for is not here")
    elif d.verdict == Verdict.HANG and not d.culprits and joined:
        call = ctx.setup_call(joined[0].joining)
        title += f": every rank here waits in {call}, so the ranks it waits for are on another node"
        evidence.append(f"{d.count(joined)} of {d.count(d.ranks)} captured ranks wait in {call}: "
                        f"the ranks that have not joined are not here")
    return [finding(RULE, absent, title, evidence, severity=severity)]


RULE = Rule(
    slug="missing-ranks",
    title="Ranks the others wait for never joined, or are not in the bundle",
    severity=Severity.WARNING,
    check=check,
    summary="Fires when ranks wait in process-group setup (init_process_group, the rendezvous, the "
            "TCPStore) for a rank that never got there: it names that rank, the line it stands at instead "
            "(a poll loop, a sleep, a download) and what the others wait in (critical on a hang). Also fires "
            "when the bundle has fewer ranks than the job's world size: a multi-node job captured on some "
            "nodes only. Names the missing ranks and nodes (group ranks); when every captured rank waits "
            "in a collective, the culprit is among the missing ones.",
    fix=FIX,
)
