"""Phrases every renderer shares, so text, Markdown and the live view say the same thing."""
from __future__ import annotations

from hangdoc.base.words import FLIGHT_STATE_WORDS, cut, rank_label, rank_ranges, share_words
from hangdoc.model import (
    Finding, FlightSummary, Progress, RankGpu, RankReport, RankState, Report, SlowKind, Slowness, Verdict,
)


def headline(report: Report) -> str:
    culprits = rank_ranges(report.culprit_ranks) if report.culprit_ranks else None
    if (timeout := _run_timeout(report)) is not None:
        return _timeout_headline(report, timeout.title, culprits)
    if report.verdict == Verdict.HANG:
        if any(f.rule == "no-progress" for f in report.findings):
            who = "nothing moves (no CPU, no I/O, same frames)"
        elif culprits:
            who = f"rank {culprits} is the culprit"
        elif any(f.rule == "collective-mismatch" for f in report.findings):
            who = "the ranks wait in different collectives and nothing tells which left the common path"
        elif (setup := _all_in_setup(report)) is not None:
            who = (f"every rank here waits in {setup} and none got through: the rank or store they wait for is "
                   "not among the processes watched (see the findings)")
        else:
            who = "every rank here waits in the same collective; the culprit is not among them"
        after = _onset(report)
        return f"HANG: {who}{after}"
    if report.verdict == Verdict.CRASH:
        who = f"rank {culprits} failed first" if culprits else "the job failed"
        return f"CRASH: {who}"
    if report.verdict == Verdict.SUSPECT:
        waiting = [x for r in report.ranks if r.state == RankState.COLLECTIVE for x in r.members
                   if x not in report.culprit_ranks]
        others = ", ".join(f"rank {r.rank} in {r.state}" for r in report.ranks if r.rank in report.culprit_ranks)
        who = (f"rank {rank_ranges(waiting)} waits in a collective" if len(waiting) == 1 else
               f"ranks {rank_ranges(waiting)} wait in a collective" if waiting else "the ranks wait in different collectives")
        why = ("one instant cannot tell a hang from a slow step (watch it for a verdict)" if report.samples == 1
               else "not yet seen long enough to tell a hang from a slow step")
        return f"SUSPECT: {who}" + (f" for {others}" if others else "") + f"; {why}"
    if report.verdict == Verdict.SLOW:
        return slow_headline(report)
    if report.verdict == Verdict.ENDED:
        return "ENDED, cause unknown: every rank is gone and nothing readable says whether it failed"
    if report.verdict == Verdict.INTERRUPTED:
        return "INTERRUPTED: stopped before a verdict; the report shows what was seen so far"
    cause = data_cause(report)
    return "HEALTHY: no hang found" + (f"; data-bound: {cause}" if cause else "")


def verdict_word(report: Report) -> str:
    """The verdict in one word, as the headline begins: TIMEOUT for a run that outlived its budget."""
    return "TIMEOUT" if _run_timeout(report) is not None else str(report.verdict).upper()


def _run_timeout(report: Report) -> Finding | None:
    """The run-timeout finding of a run that outlived its budget (its verdict a hang's)."""
    if report.verdict != Verdict.HANG:
        return None
    return next((f for f in report.findings if f.rule == "run-timeout"), None)


def _timeout_headline(report: Report, title: str, culprits: str | None) -> str:
    """A budget ran out: say that, and what was read by then, never a stall nobody saw (the verdict
    and the exit code stay a hang's, so that CI fails)."""
    said = f"TIMEOUT: {title[:1].lower()}{title[1:]}"
    watched = f"{report.ranks_seen} ranks watched"
    if report.ranks_seen == 0:
        return f"{said} ({watched})"
    if report.slow is not None:
        return f"{said}; it still moved, slowly: {slow_headline(report).removeprefix('SLOW: ')} ({watched})"
    who = f": rank {culprits} is the likely culprit" if culprits else ""
    return f"{said}; no rank was blocked long enough for a hang verdict{who} ({watched})"


def data_cause(report: Report) -> str | None:
    """The first finding's word on what makes the job data-bound ("workers confined to CPU 0")."""
    return next((f.cause for f in report.findings if f.cause), None)


_SETUP_CALLS = ("init_process_group", "new_group", "_new_process_group_helper", "_store_based_barrier",
                "rendezvous", "_create_c10d_store", "next_rendezvous", "TCPStore")


def _all_in_setup(report: Report) -> str | None:
    """The process-group setup call every rank waits in, by its top frame; None when not all do."""
    calls = {(r.top_frame or "").split(" ", 1)[0] for r in report.ranks}
    if not report.ranks or not calls <= set(_SETUP_CALLS):
        return None
    return "init_process_group" if len(calls) > 1 else calls.pop()


def slow_headline(report: Report) -> str:
    slow = report.slow
    if slow is None:
        return "SLOW: the job moves, slowly"
    if slow.kind == SlowKind.DATA_BOUND and slow.waited_s is not None:
        who = rank_ranges(slow.stragglers) if slow.stragglers else "?"
        cause = data_cause(report)
        because = f" ({cause})" if cause else ""
        return (f"SLOW: data-bound{because}: rank {who} has waited {span(slow.waited_s)} on one batch, longer than "
                f"the hang threshold, while its DataLoader workers move on through their data{batch_pace(slow)}")
    if slow.kind == SlowKind.DATA_BOUND:
        cause = data_cause(report)
        return (f"SLOW: data-bound{f': {cause};' if cause else ':'} every rank waits on its DataLoader at least "
                f"{slow.others_wait:.0%} of the time "
                f"(up to {slow.speedup_at_most:.1f}x faster with its data on time)")
    who = rank_ranges(slow.stragglers)
    noun, verb = ("rank", "is the straggler") if len(slow.stragglers) == 1 else ("ranks", "are the stragglers")
    cause = data_cause(report) if slow.doing == RankState.DATALOADER else None
    verb += f" (data-bound: {cause})" if cause else ""
    return (f"SLOW: {noun} {who} {verb}: the others wait {slow.others_wait:.0%} of every step for it "
            f"(up to {slow.speedup_at_most:.1f}x faster without it)")


def batch_pace(slow: Slowness) -> str:
    """"(worker 0 reads libri000.tar.bz2 at 2.0 MB/s, 9 backward seeks, 64% of the file reached); its
    next batch in about 1 min at this pace": a long batch's data, as far as it was read."""
    pace = slow.pace
    said = ""
    if pace is not None:
        name = pace.path.rsplit("/", 1)[-1]
        rate = f" at {pace.rate_bytes_s / 1e6:.1f} MB/s" if pace.rate_bytes_s else ""
        seeks = (f", {pace.rewinds} backward seek{'s' if pace.rewinds != 1 else ''} (each decompressing from the "
                 "file's start again)" if pace.rewinds else "")
        reached = f", {pace.furthest / pace.size:.0%} of the file reached" if pace.size else ""
        who = f"worker {pace.worker}" if pace.worker is not None else f"pid {pace.pid}"
        said = f" ({who} reads {name}{rate}{seeks}{reached})"
    if slow.next_batch_s is None:
        return said
    return (f"{said}; its next batch in about {span(slow.next_batch_s)} at this pace (as long again as this one "
            "has taken: how many samples it still needs is the worker's own)")


def shares_line(report: Report) -> str | None:
    """Where each rank's time went over its last steps, one line: "rank 0 waits 63 % (46-78) ..."."""
    ranks = [r for r in report.ranks if r.shares is not None]
    if not ranks or report.failed:
        return None
    parts = [f"rank {rank_label(r.rank)} {share_words(r.shares)}" for r in ranks[:8]]
    more = f"; {len(ranks) - 8} more ranks" if len(ranks) > 8 else ""
    n = min(r.shares.samples for r in ranks)
    return f"Time (each rank's last {n}+ samples after its first steps; 95 % intervals): " + "; ".join(parts) + more + "."


def _onset(report: Report) -> str:
    if report.detected_after_s is None:
        return ""
    waited = _waited_before(report)
    if waited is not None and report.verdict == Verdict.HANG:
        return (f" (no step for at least {span(report.detected_after_s)}; stalled at least "
                f"{span(waited)} before hangdoc attached)")
    if report.before is not None and report.before.waited_s is not None:
        return f" (no step for at least {span(report.detected_after_s)})"
    return f" (detected {report.detected_after_s:.1f} s after the stall began)"


def _waited_before(report: Report) -> float | None:
    """How long a rank had waited before hangdoc attached, when long enough to say (1 s)."""
    before = report.before
    return before.waited_s if before is not None and before.waited_s is not None and before.waited_s >= 1 else None


def rank_source_line(report: Report) -> str | None:
    """Where the ranks were read, when no environment named them (mp.spawn, Lightning's launcher)."""
    said = [f"rank {rank_label(r.rank)}: {r.rank_source}" for r in report.ranks if r.rank_source]
    return ("No environment names the ranks; read from the job itself: " + "; ".join(said)) if said else None


def wrapper_line(report: Report, shown: int = 4) -> str | None:
    """The ranks a launcher ran under wrappers (a shell, `timeout`, conda's `run`): each rank is the
    Python process below them, and the innermost is its parent."""
    chains: dict[tuple[str, ...], list[RankReport]] = {}
    for row in report.ranks:
        if row.wrappers:
            chains.setdefault(tuple(" ".join(w.cmdline) or "?" for w in row.wrappers), []).append(row)
    said = []
    for chain, rows in chains.items():
        ranks = rank_ranges(m for r in rows for m in r.members)
        pids = ", ".join(str(r.wrappers[-1].pid) for r in rows[:shown]) + (", ..." if len(rows) > shown else "")
        said.append(f"rank{'s' if len(rows) > 1 or ',' in ranks or '-' in ranks else ''} {ranks or '-'} under "
                    f"{' > '.join(cut(c, 80) for c in chain)} (parent pid{'s' if len(rows) > 1 else ''} {pids})")
    return ("Ranks behind wrappers, each the Python process its wrapper runs: " + "; ".join(said)) if said else None


def before_line(report: Report) -> str | None:
    """What the system knew of the past when hangdoc attached, in one line."""
    before = report.before
    if before is None or report.verdict == Verdict.CRASH:
        return None
    parts = []
    if _waited_before(report) is not None:
        who = f"rank {rank_label(before.rank)}" if before.rank is not None else "a rank"
        how = {"flight-recorder": "its Flight Recorder shows the collective enqueued then, not completed",
               "peers": "no rank outside the wait, which it needs, had run since"}.get(
                   before.told_by, "its main thread had not run since")
        parts.append(f"{who} had waited in {before.wait or 'a collective'} for at least {span(before.waited_s)} ({how})")
    if before.log is not None and before.log_quiet_s is not None:
        parts.append(f"the job last wrote {_short(before.log)} {span(before.log_quiet_s)} before")
    if before.loop_value and before.loop_age_s:
        parts.append(f"rank {rank_label(before.rank)}'s loop stood at {before.loop_counter}={before.loop_value:,} "
                     f"{span(before.loop_age_s)} after it started (at most {before.loop_age_s / before.loop_value:.2g} s "
                     "a step on average)")
    return "Before hangdoc attached: " + "; ".join(parts) + "." if parts else None


def span(seconds: float) -> str:
    """A length of time in prose: "35 s", "14 min", "2.5 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _short(path: str) -> str:
    host, sep, rest = path.partition(":")
    name = (rest if sep and "/" not in host else path).rsplit("/", 1)[-1]
    return (host + ":" + name) if sep and "/" not in host else name


def threshold_line(report: Report) -> str | None:
    """How hang was told from slow, in one line: "the samples saw a rank's loop move at most 4.1 s
    apart (12 moves seen, ...), so hang after 12.3 s; no rank has stepped for 13 s". A move is a
    sample at which the loop had stepped: with steps faster than the samples, the gap between moves
    is the sampling's, so it is never called a step's time."""
    t = report.threshold
    if t is None or report.verdict == Verdict.CRASH:
        return None
    quiet = f"no rank has stepped for {t.quiet_s:.0f} s"
    if t.source == "past":
        waited = _waited_before(report)
        before = f", {span(waited)} of it before hangdoc attached" if waited is not None else ""
        if report.before is not None and not report.before.others_asleep:
            return (f"Progress: a rank has waited for at least {span(t.quiet_s)}{before}, so no rank has stepped "
                    f"for that long: past the {t.hang_after_s:g} s threshold, counted from the wait's start "
                    f"(a rank outside the wait still works; nothing stepped in {report.samples} samples).")
        return (f"Progress: a rank has waited for at least {span(t.quiet_s)}{before}, and every rank outside the "
                f"wait has been asleep since hangdoc's first sample (no step, CPU, I/O or new frame in "
                f"{report.samples} samples), so hang once a wait is {t.hang_after_s:g} s old.")
    start = f" in restart {t.start}" if t.start else ""
    if t.source == "given":
        rule = f"hang after {t.hang_after_s:g} s (--hang-after)"
    elif t.source == "learned":
        rule = (f"the samples saw a rank's loop move at most {t.longest_step_s:.1f} s apart{start} ({t.steps_seen} "
                f"moves seen, each rank's first gap, its start-up, left out; a gap between samples, not a step's "
                f"time), so hang after {t.hang_after_s:g} s")
    elif start:
        rule = (f"no step seen yet{start} (its start-up; the earlier start's rhythm is not used), so hang after "
                f"the default {t.hang_after_s:g} s (--hang-after sets it)")
    else:
        rule = f"no step seen yet, so hang after the default {t.hang_after_s:g} s (--hang-after sets it)"
    signal = "" if t.signal == "loop" else (" [no loop counters could be read: judged by the stack going round "
                                           "the loop, the main threads' wake-ups and the bytes moved]")
    if t.moving_s is not None:
        what = ("a rank's GPU was at work (kernels moving memory, not a collective's spin)" if t.moving == "gpu"
                else "the DataLoader workers' data moved on (new ground, or a new place after a backward seek)")
        outlasts = _outlasts(report)
        if outlasts is None and report.verdict == Verdict.HANG and _run_timeout(report) is None:
            outlasts = ", and nothing new since: past the threshold too"
        quiet += f", but {what} {t.moving_s:.0f} s ago" + (outlasts or " (moving is progress: slow, not hung)")
    elif t.source == "given" and any(w.name == "workers" and w.moved for w in t.witnesses):
        quiet += (" (the DataLoader workers still work, see the witnesses; a step longer than the bound you gave "
                  "is a hang by it)")
    return f"Progress: {rule}; {quiet}.{signal}"


def _outlasts(report: Report) -> str | None:
    """Why a batch whose data moves is a hang: at its pace it would outlast the process group's timeout."""
    slow = report.slow
    if report.verdict != Verdict.HANG or slow is None or slow.waited_s is None or slow.next_batch_s is None:
        return None
    if report.pg_timeout_s is not None and slow.waited_s + slow.next_batch_s < report.pg_timeout_s:
        return None     # a hang of another making (a run's --timeout): the batch would not outlast it
    timeout = f"{report.pg_timeout_s:.0f} s" if report.pg_timeout_s is not None else "its timeout"
    return (f"; but rank {rank_ranges(slow.stragglers)} has waited {span(slow.waited_s)} on one batch"
            f"{batch_pace(slow)}: past the process group's timeout ({timeout}) in all, which ends the job: a hang")


def proof_line(report: Report) -> str | None:
    """What proved the hang, when a fact did before the threshold passed: "Proof: rank 1 (pid 812)
    is stopped (state T: ...); named at the second sample that agreed on it, not at the threshold"."""
    t = report.threshold
    if t is None or t.proof is None or report.verdict != Verdict.HANG:
        return None
    return (f"Proof: {t.proof}; a proven hang is named once two samples agree on it, "
            f"whatever the {t.hang_after_s:g} s threshold.")


def witnesses_line(report: Report) -> str | None:
    """What each witness of progress said while the job was quiet: "Witnesses over the quiet 61 s:
    loop counters: none could be read (...); stack: every rank stood at one place in its own code; ..."."""
    t = report.threshold
    if t is None or not t.witnesses or report.verdict not in (Verdict.HANG, Verdict.SUSPECT):
        return None
    said = "; ".join(f"{w.name}: {w.said}" for w in t.witnesses)
    return f"Witnesses over the quiet {t.quiet_s:.0f} s: {said}."


def timeout_line(report: Report) -> str | None:
    if report.verdict != Verdict.HANG or report.timeout_remaining_s is None:
        return None
    minutes = report.timeout_remaining_s / 60
    backend = {"nccl": "NCCL", "gloo": "gloo"}.get(report.backend or "", "this backend")
    return (f"The process group's timeout (default {report.pg_timeout_s:.0f} s for {backend}) "
            f"would kill the job and this evidence in about {minutes:.0f} min.")


def gpu_cell(gpu: RankGpu | None) -> str:
    if gpu is None:
        return "-"
    util, power = gpu.utilization_pct, gpu.power_w
    parts = [f"GPU{gpu.index}", f"{util}%" if util is not None else "?%"]
    if power is not None:
        parts.append(f"{power:.0f}W")
    if gpu.activity == "spin":         # 100 % at idle power: a kernel waiting, not working
        parts.append("spin")
    return " ".join(parts)




def flight_words(summary: FlightSummary | None) -> str:
    """"on (2000 entries), pipe on 8 of 8 ranks" for `ps` and the live view."""
    if summary is None:
        return "-"
    states = [FLIGHT_STATE_WORDS.get(state, state) for state in summary.states]
    words = "/".join(states) + (f" ({'/'.join(map(str, summary.buffer_sizes))} entries)"
                                        if summary.buffer_sizes else "")
    return words + (f", pipe on {summary.pipes} of {summary.ranks} ranks" if summary.pipes else "")


# The PROGRESS column's words (`hangdoc explain glossary`). "working" is the analysis's
# Progress.SLOW, "still" its STUCK: next to a SLOW or HEALTHY verdict, "slow" and "stuck" said what
# they do not mean there.
PROGRESS_WORDS = {Progress.ACTIVE: "active", Progress.SLOW: "working", Progress.STUCK: "still"}


def progress_word(rank: RankReport) -> str:
    """A rank's PROGRESS cell: "active", "working" or "still"; "-" for a rank that has exited."""
    if rank.state == RankState.EXITED:
        return "-"
    return PROGRESS_WORDS.get(rank.progress, str(rank.progress))
