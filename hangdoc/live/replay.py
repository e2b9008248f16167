"""`hangdoc replay DIR`: a recorded watch run again, round by round, through the same step.

Each recorded round is handed to `live/step.py` as the live watch handed it; where the step stops,
the judgements the live watch ended with (recorded as `final`) are made again from their recorded
evidence. The same code gives the same report, verdict and round, byte for byte; changed code
gives its own verdict on the very rounds the live watch saw (a fix checked against the run that
failed). Where the replay stops at a round the live watch went past, it ends there with a watch's
own ending; where it goes on past the recording's last round, it ends with what it read by then.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from hangdoc.base.errors import BadBundle
from hangdoc.bundle.recording import read_recording
from hangdoc.live.step import Policy, Seen, State, ending_of, watch_ending, watch_step
from hangdoc.model import Bundle, StopReason
from hangdoc.report.judge import RUNNING, Judgement, judge, with_outlived

UNSET = object()


@dataclass(frozen=True)
class Replayed:
    """What a replay found: the judgement it ends with, the round it stopped at (None: it read every
    round without a verdict of the step's), that round's time since the watch began, and where the
    live watch stopped (`live_rounds`: the rounds it recorded)."""

    judgement: Judgement
    bundle: Bundle
    reason: StopReason | None
    stop_round: int | None
    stop_at_s: float | None
    live_rounds: int
    command: str
    cut: bool = False

    @property
    def report(self):
        return self.judgement.report

    @property
    def exit_code(self) -> int:
        return self.judgement.exit_code

    def summary(self) -> str:
        """One line: the verdict, the round it came at and how that compares with the live watch."""
        verdict = self.report.verdict.value.upper()
        if self.stop_round is None:
            where = f"no stop in the {self.live_rounds} rounds recorded; the verdict on all of them is {verdict}"
        else:
            at = f" (+{self.stop_at_s:.1f} s)" if self.stop_at_s is not None else ""
            where = f"{verdict} at round {self.stop_round}{at} of the {self.live_rounds} recorded"
            if self.stop_round < self.live_rounds:
                where += f"; the live watch went on to round {self.live_rounds}: this code stops earlier"
            else:
                where += ", where the live watch stopped too"
        cut = "; the recording was cut at its size bound, the rounds after it are not in it" if self.cut else ""
        return f"replay of a recorded `{self.command}`: {where}{cut}"


def replay(directory: str | Path, hang_after=UNSET) -> Replayed:
    """Run the recording in `directory` through the watch's step; `hang_after`: another threshold
    than the live watch's (None: learned from the steps)."""
    header, records = read_recording(directory)
    command = str(header.get("command") or "watch")
    state, policy = State(), Policy()
    bundle = None
    stop: tuple[StopReason, int, float] | None = None
    live_rounds, rounds = 0, 0
    ended_live = False          # the finals recorded are this replay's end too
    cut = False
    outlived: tuple[str, ...] = ()
    for record in records:
        if record.kind == "start":
            policy = _policy(record.meta.get("policy") or {}, hang_after)
        elif record.kind == "round":
            live_rounds += 1
            if stop is not None or record.bundle is None:
                continue               # the live watch went on past the replay's stop
            meta = record.meta
            seen = Seen(record.bundle, float(meta.get("at_s") or 0.0), ended=bool(meta.get("ended")),
                        probes_due=bool(meta.get("probes_due")), own_records=bool(meta.get("own_records")))
            state, _, decision = watch_step(state, seen, policy)
            rounds, bundle = rounds + 1, record.bundle
            if decision.stop is not None:
                stop = (decision.stop, rounds, seen.at_s)
        elif record.kind == "final" and record.bundle is not None:
            if stop is not None and rounds != live_rounds:
                continue               # the live watch's end came later than this replay's
            judgement = judge(record.bundle, ending_of(record.meta.get("ending") or {}), state.judgement,
                              hang_after=policy.hang_after_s, live=state.live)
            state, bundle, ended_live = dataclasses.replace(state, judgement=judgement), record.bundle, True
        elif record.kind == "outlived":
            outlived = tuple(str(n) for n in record.meta.get("names") or ())
        elif record.kind == "cut":
            cut = True
    if bundle is None:
        raise BadBundle(f"{directory}: the recording holds no round (the watch ended before its first)")
    if not ended_live:
        ending = RUNNING if stop is None else watch_ending(stop[0], policy)
        if command == "run":
            ending = dataclasses.replace(ending, run=True)
        judgement = judge(bundle, ending, state.judgement, hang_after=policy.hang_after_s, live=state.live)
    else:
        judgement = state.judgement
    if outlived and ended_live:
        judgement = dataclasses.replace(judgement, report=with_outlived(judgement.report, outlived))
    return Replayed(judgement, bundle, stop[0] if stop else None, stop[1] if stop else None,
                    stop[2] if stop else None, live_rounds, command, cut)


def _policy(data: dict, hang_after) -> Policy:
    names = {f.name for f in dataclasses.fields(Policy)}
    policy = Policy(**{k: v for k, v in data.items() if k in names})
    return policy if hang_after is UNSET else dataclasses.replace(policy, hang_after_s=hang_after)

