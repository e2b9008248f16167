"""workers-restarted: the launcher restarted the job's ranks (torchrun --max-restarts): which rank
failed, how and why, and which restart of how many this is. The job is judged by its newest
generation; this says what the earlier ones went through."""
from __future__ import annotations

from hangdoc.analyze.restarts import Failure, Restarts
from hangdoc.analyze.startup import RankSetup
from hangdoc.base.words import rank_set, start_name
from hangdoc.model import Finding, Severity, Verdict
from hangdoc.rules.base import Context, Rule, finding


def check(ctx: Context) -> list[Finding]:
    restarts = ctx.worked.restarts
    if restarts is None or not (restarts.restarted or restarts.pending):
        return []
    first = restarts.first
    of = f" of {restarts.max_restarts}" if restarts.max_restarts is not None else ""
    if restarts.pending:
        title = f"The launcher is restarting the ranks (restart {restarts.generation + 1}{of})"
    elif restarts.used_up:
        times = f"{restarts.generation} time{'s' if restarts.generation != 1 else ''}"
        title = f"The ranks were restarted {times}{of}, and the last start failed too"
        last = restarts.last
        if last is not None and not _same_failure(restarts):
            title += f" (rank {_rank(last)} {last.how})"
    else:
        title = f"The launcher restarted the ranks: restart {restarts.generation}{of}"
    if first is not None:
        title += f"; first, rank {_rank(first)} {first.how}"
    evidence = [_line(ctx, f) for f in restarts.failures]
    watched = {f.generation for f in restarts.failures}
    unseen = [g for g in range(restarts.generation) if g not in watched]
    if unseen:
        evidence.append(f"start(s) {', '.join(map(str, unseen))} failed before hangdoc watched them: the launcher's "
                        f"output says how (TORCHELASTIC_RESTART_COUNT={restarts.generation} in the ranks' environment)")
    evidence.append(_now(ctx, restarts))
    ranks = [f.rank for f in restarts.failures]
    history = finding(RULE, ranks, title, evidence, _fix(ctx, restarts))
    stuck = _startup_hang(ctx, restarts)
    return [stuck, history] if stuck is not None else [history]


def _startup_hang(ctx: Context, restarts: Restarts) -> Finding | None:
    """The newest start hangs in its own start-up: every live rank of it waits in process-group
    setup. What they wait for, from their sockets: the store, their peers, a stale address."""
    d = ctx.diagnosis
    live = [v for v in d.ranks if v.exited_at is None]
    if d.verdict != Verdict.HANG or restarts.pending or not live or any(v.joining is None for v in live):
        return None
    name = start_name(restarts.generation)
    call = ctx.setup_call(live[0].joining)
    since = min((v.joining_since for v in live if v.joining_since is not None), default=d.decided_at)
    waiting = sorted(r for v in live for r in v.ranks)
    setups = ctx.worked.setups([v.info for v in live])
    evidence = [f"{name}'s {rank_set(waiting)} {'waits' if len(waiting) == 1 else 'wait'} in {call} for "
                f"{d.decided_at - since:.0f} s: no rank of it got through its start-up (no step seen in {name})"]
    evidence += [_setup_line(s) for s in setups]
    kinds = {s.waits_for for s in setups if s.reached_store is not None}
    if "store" in kinds:
        store = next(s.store for s in setups if s.waits_for == "store")
        what = f"the store at {store}, which {'not every rank' if len(kinds) > 1 else 'none of them'} reached"
        fix = STORE_FIX
    elif "stale" in kinds:
        stale = next(s.stale[0] for s in setups if s.stale)
        what = f"a stale address from the earlier start ({stale[0]}, {stale[1]})"
        fix = STALE_FIX
    elif kinds:
        what = "their peers: each reached the store, none connected to another"
        fix = PEERS_FIX
    else:
        what = "the store or their peers (their sockets could not be read)"
        fix = PEERS_FIX
    title = f"{name[:1].upper()}{name[1:]} never finished its start-up: its ranks wait in {call} for {what}"
    return finding(RULE, waiting, title, evidence, fix, severity=Severity.CRITICAL)


def _setup_line(setup: RankSetup) -> str:
    who = f"rank {setup.rank if setup.rank is not None else '?'} (pid {setup.pid})"
    if setup.reached_store is None:
        return f"{who}: its sockets could not be read"
    store = setup.store or "its store"
    parts = [f"reached the store at {store}" if setup.reached_store else f"holds no connection to the store at {store}"]
    if setup.listens:
        parts.append(f"listens for its peers on {', '.join(setup.listens[:3])}")
    for address, owner in setup.stale:
        parts.append(f"connects to {address}, {owner}: a stale address the store handed out again")
    fresh = [a for a in setup.peers if a not in {s for s, _ in setup.stale}]
    parts.append(f"connected to {', '.join(fresh[:3])}" if fresh else "no connection to any peer")
    return f"{who}: " + "; ".join(parts)


_TIMEOUT = ("pass `init_process_group(timeout=timedelta(minutes=5))`, so that a start-up that cannot finish fails "
            "and the launcher restarts it (or ends the job) in minutes instead of waiting for ever")
STORE_FIX = (f"The restarted ranks cannot reach the store: check that the launcher's store still serves (torchrun's "
             f"agent on the c10d endpoint) and that nothing in the script sets MASTER_ADDR / MASTER_PORT or an "
             f"init_method of its own; {_TIMEOUT}.")
STALE_FIX = (f"The store kept an address of the earlier start and handed it to the restarted ranks: give every start "
             f"a fresh rendezvous (`--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT` with torchrun's own store, not "
             f"a TCPStore or MASTER_PORT the script keeps across restarts); {_TIMEOUT}.")
PEERS_FIX = (f"The restarted ranks reached the store but never reached each other: their peers' addresses did not "
             f"come from the store, or a peer's listener cannot be reached (a firewall, a wrong interface: "
             f"GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME). The first start's failure (the finding below) is what "
             f"made the launcher restart the ranks; {_TIMEOUT}.")


def _rank(failure: Failure) -> str:
    return str(failure.rank) if failure.rank is not None else "?"


def _line(ctx: Context, failure: Failure) -> str:
    start = ctx.bundle.samples[0].time if ctx.bundle.samples else None
    when = ""
    if failure.time is not None and start is not None:
        off = failure.time - start
        when = f" at +{off:.1f} s" if off >= 0 else f" {-off:.1f} s before the first sample kept"
    said = f": {failure.said}" if failure.said else ""
    name = "the first start" if failure.generation == 0 else f"restart {failure.generation}"
    return f"{name}: rank {_rank(failure)} (pid {failure.pid}) {failure.how}{when}{said}"


def _now(ctx: Context, restarts: Restarts) -> str:
    left = f", {restarts.left} left" if restarts.left is not None else ""
    if restarts.pending:
        return f"the launcher lives and starts the ranks again (restart {restarts.generation + 1}{left})"
    verdict = ctx.diagnosis.verdict
    if restarts.used_up:
        return f"no restart left (--max-restarts={restarts.max_restarts}): the job failed"
    if verdict in (Verdict.HEALTHY, Verdict.SLOW):
        ended = ctx.diagnosis.ranks and all(v.exited_at is not None for v in ctx.diagnosis.ranks)
        return f"restart {restarts.generation} {'ran to its end' if ended else 'runs on'}{left}: the job is judged by it"
    return f"restart {restarts.generation} is the job now{left}: the verdict is its"


def _fix(ctx: Context, restarts: Restarts) -> str:
    if restarts.used_up and _same_failure(restarts):
        return (f"{RULE.fix} Here the same failure came back every start: it is no transient error; fix it "
                "where it was raised (the cause at the top of the report).")
    if restarts.used_up and restarts.last is not None and ctx.worked.launcher_made(restarts.last):
        return (f"{RULE.fix} Here the restart failed otherwise than the first start, in process-group setup, "
                "of the launcher's making: the first start's failure is the one to fix; for the restarts to "
                "work, use the c10d rendezvous (`--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT`) and give "
                "init_process_group a timeout.")
    if restarts.used_up:
        return (f"{RULE.fix} Here the restart failed otherwise than the first start: the cause at the top of the "
                "report is the last start's failure; the first start's is history, and may need fixing too.")
    return RULE.fix


def _same_failure(restarts: Restarts) -> bool:
    """Every start failed the same way: the same rank, the same error."""
    return len({(f.rank, f.said) for f in restarts.failures}) == 1


RULE = Rule(
    slug="workers-restarted",
    title="The launcher restarted the ranks after a failure",
    severity=Severity.WARNING,
    check=check,
    summary="Fires when torchrun's elastic agent (--max-restarts) started the job's ranks again after one "
            "failed, or is about to: for each start that failed, which rank failed first, how it died (exit "
            "code or signal, read as it died) and the exception it printed; restart k of the maximum "
            "(TORCHELASTIC_RESTART_COUNT / TORCHELASTIC_MAX_RESTARTS in the ranks' environment). The verdict "
            "is the newest start's: a job that recovered ends healthy with this warning; with the restarts "
            "used up it is a crash named by the last start's own first failure, the earlier starts its history.",
    fix="A restart hides a failure: read why the rank failed; a failure that comes back every start is a bug, "
        "not a transient error, and only costs the restarts' time.",
)
