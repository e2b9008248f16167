"""Record the replay tier: every zoo scenario run once under `hangdoc run --record`, kept in
tests/replay/<case>/ when the live verdict is its ground truth.

    python tests/replay_record.py                 # every case (about 15 minutes on two cores)
    python tests/replay_record.py --only jitter   # one case, or a few (--only A --only B)
    python tests/replay_record.py --list

Each case directory holds the watch's recording (recording.zst: every round the probes returned)
and case.json: the scenario, the options it was watched with, its ground truth, the round the live
watch stopped at and the fault's time (a hang's detection time is read from it). A run whose live
verdict misses its ground truth is not kept: the script says so and exits 1 (run it again, or
look at the job). tests/unit/test_replay_tier.py replays them all in seconds.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from hangdoc.scenarios import SCENARIOS  # noqa: E402

REPLAY = HERE / "replay"
CHECKOUT = "/src/hangdoc"   # the checkout's path, as the kept recordings name it (any machine's reads the same)


def keep_recording(source: Path, target: Path) -> None:
    """`source` (a recording.zst) copied to `target` with the checkout's path on this machine written
    as CHECKOUT: the tier holds no path of the machine that recorded it, and replays the same."""
    import zstandard

    with open(source, "rb") as handle:
        raw = zstandard.ZstdDecompressor().stream_reader(handle).read()
    raw = raw.replace(str(HERE.parent).encode(), CHECKOUT.encode())
    target.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))


def keep_case(name: str, recording: Path, about: dict) -> int:
    """tests/replay/<name>/ (an earlier one replaced): the recording of `recording` (a --record DIR)
    and case.json, what the tier holds it to; the recording's size in bytes."""
    target = REPLAY / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    keep_recording(recording / "recording.zst", target / "recording.zst")
    (target / "case.json").write_text(json.dumps(about, indent=2) + "\n")
    return (target / "recording.zst").stat().st_size


def keep_missed(name: str, recording: Path, *also: Path) -> Path:
    """A recording whose verdict missed its ground truth (and `also`: the job's log), kept in a
    temporary directory to replay: the directory."""
    kept = Path(tempfile.mkdtemp(prefix=f"hangdoc-missed-{name}-"))
    for path in (recording / "recording.zst", *also):
        shutil.copy(path, kept / path.name)
    return kept


@dataclass(frozen=True)
class Case:
    """A zoo scenario watched one way: `hang_after` None learns the threshold from the steps."""

    name: str
    scenario: str
    hang_after: float | None
    interval: float
    timeout: float = 150.0
    verdict: str | None = None        # the ground truth when it is not the scenario's own

    def truth(self) -> str:
        return self.verdict or SCENARIOS[self.scenario].verdict


def cases() -> list[Case]:
    """Every CPU scenario as test_zoo watches it (a hang at a short given threshold, the rest at the
    learned one), the hangs found at the learned threshold, and the straggler once called a hang."""
    found = [Case(s.name, s.name, 6.0 if s.verdict == "hang" else None, 0.5)
             for s in SCENARIOS.values() if not s.needs_gpu]
    found += [Case(f"{name}-learned", name, None, 1.0) for name in ("compute-straggler", "uneven-shards")]
    found.append(Case("slow-rank-at-10s", "slow-rank", 10.0, 2.0, verdict="healthy"))
    return found


def record(case: Case) -> tuple[bool, str]:
    from hangdoc.scenarios.evaluate import evaluate

    scenario = SCENARIOS[case.scenario]
    with tempfile.TemporaryDirectory(prefix=f"hangdoc-replay-{case.name}-") as tmp:
        work, recording = Path(tmp) / "job", Path(tmp) / "recording"
        work.mkdir()
        result = evaluate(scenario, work, hang_after=case.hang_after, interval=case.interval,
                          timeout=case.timeout, record=recording)
        got = (str(result.verdict), list(result.culprits), list(result.rules))
        truth = case.truth()
        culprits = list(scenario.culprit_ranks) if truth != "healthy" else []
        rule_ok = truth == "healthy" or scenario.expected_rule is None or scenario.expected_rule in result.rules
        if got[0] != truth or got[1] != culprits or not rule_ok:
            kept = keep_missed(case.name, recording, work / "job.log")
            return False, (f"live verdict {got} is not the ground truth ({truth}, {culprits}, "
                           f"{scenario.expected_rule}); its recording: hangdoc replay {kept}")
        from hangdoc.live.replay import replay

        replayed = replay(recording)
        if (replayed.report.verdict, replayed.report.culprit_ranks) != (result.verdict, result.culprits):
            return False, f"the replay read {replayed.report.verdict} where the live watch read {result.verdict}"
        fault = scenario.read_fault(work)
        about = {
            "scenario": case.scenario, "about": scenario.description, "hang_after": case.hang_after,
            "interval": case.interval, "verdict": truth, "culprit_ranks": culprits,
            "rule": scenario.expected_rule if truth != "healthy" else None,
            "live_rounds": replayed.live_rounds, "stop_round": replayed.stop_round, "fault_time": fault["time"] if fault else None,
            "live_seconds_to_verdict": result.seconds_to_verdict,
        }
        size = keep_case(case.name, recording, about)
        return True, f"{truth} {culprits} in {result.wall_s:.0f} s, {size // 1024} KiB"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="a case's name (repeatable)")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    chosen = [c for c in cases() if not args.only or c.name in args.only]
    if args.list:
        for case in chosen:
            print(case.name)
        return 0
    failed = 0
    for case in chosen:
        ok, said = record(case)
        failed += not ok
        print(f"{'kept  ' if ok else 'MISSED'} {case.name}: {said}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
