"""Record the rules' golden bundles from real torchrun jobs on this machine.

    .venv/bin/python tests/golden_record.py                  # record every case
    .venv/bin/python tests/golden_record.py bz2-shards ...   # record these cases
    .venv/bin/python tests/golden_record.py --markdown-only  # rewrite expected.md (and expected.txt where kept) from the stored bundles
    .venv/bin/python tests/golden_record.py --expected-only  # rewrite expected.json in its normal form
    .venv/bin/python tests/golden_record.py --docs           # rewrite the examples in hangdoc/rules/pages/*.md
    .venv/bin/python tests/golden_record.py --list
    .venv/bin/python tests/golden_record.py --replay [CASE...]  # record the watch of each real case for the replay tier

A case is its folder, tests/golden/<case>/: its expected.json says what it shows (the verdict, the
culprits, the rules that must fire, its look-alikes and its rules' near misses) and how its job
starts ("job": one of STARTS below, with its args and options: a scenario of hangdoc/scenarios/ or a
mode of a job in tests/jobs/). A new case is a folder with an expected.json; recording it writes
bundle.json and expected.md beside it (expected.txt, the text report, with --text). Each case
starts its real 2-rank gloo job, waits for its markers, runs
`python -m hangdoc watch LAUNCHER_PID --interval 0.5 --hang-after 4 --no-live --no-gpu
--format json --out ...` (healthy jobs: the same Watcher in-process, since watch saves no
bundle when nothing is found), always stops the job and trims the bundle to its last samples.
A derived case ("derive": [source case, edit]) edits another case's bundle where this machine
cannot produce the real thing (its README says how); a case with neither was recorded by hand
(its README.md says how).
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hangdoc.report import judge  # noqa: E402
from hangdoc.bundle.files import load_bundle  # noqa: E402
from hangdoc.model import Bundle, LogTail, Role  # noqa: E402
from hangdoc.render.markdown import report_markdown  # noqa: E402
from hangdoc.render.text import render_text  # noqa: E402
from hangdoc.scenarios import SCENARIOS  # noqa: E402
from hangdoc.scenarios.data import make_shards, synth_wav, write_list  # noqa: E402
from hangdoc.scenarios.launch import RunningJob, start_job, stop_job, torchrun_cmd, wait_for  # noqa: E402
from hangdoc.base.serde import to_dict  # noqa: E402
from replay_record import CHECKOUT  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"
JOBS = ROOT / "tests" / "jobs"
TEXT_WIDTH = 120   # expected.txt: the text report as a 120-column terminal shows it, without colour
KEEP_SAMPLES = 12
KEEP_LOG_LINES = 400   # what the collector keeps: the whole tail
WATCH = ("--no-live", "--no-gpu", "--format", "json")
INTERVAL_S = 0.5


@dataclass(frozen=True)
class Case:
    """A golden case, as its tests/golden/<name>/expected.json says it (`Case.of`)."""

    name: str
    about: str
    verdict: str
    culprits: tuple[int, ...]
    fire: tuple[str, ...]
    job: dict | None = None              # {"start": a STARTS name, "args": [...], "options": {...}}
    timeout_s: float | None = None       # healthy jobs: how long to watch
    derive: tuple[str, str] | None = None   # (source case, the name of an EDITS edit)
    readme: str = ""
    device: bool = False                 # recorded on a GPU machine by tests/gpu/device_check.py, not here
    hang_after_s: float | None = 4.0     # the watch's --hang-after (a restarted job's new ranks start up longer;
                                         # None: none given, the threshold learned from the steps)
    interval_s: float = INTERVAL_S       # the watch's --interval
    # The rules this case is a near miss for, which must stay quiet: those a naive reading would fire
    # (a healthy pause: slow-rank; a roomy /dev/shm: shm-exhausted), not every other rule.
    look_alikes: tuple[str, ...] = ()
    # rule -> the cases it must stay quiet on: a case's own rules' near misses, named where the rule's
    # case is, so a new rule's near miss among the existing cases touches none of their files.
    near_misses: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # What the recorder does to the job once it is ready, as an operator, a debugger or the kernel does
    # from outside: {"signal": "SIGSTOP", "rank": 1} (the rank's pid is what its ready marker holds).
    then: dict | None = None

    @property
    def start(self) -> Callable[[Path], tuple[list[str], list[Path]]] | None:
        """workdir -> (the job's command, the markers it writes when ready)."""
        if self.job is None:
            return None
        return STARTS[self.job["start"]](*self.job.get("args", ()), **self.job.get("options", {}))

    @classmethod
    def of(cls, folder: Path) -> "Case":
        said = json.loads((folder / "expected.json").read_text())
        readme = folder / "README"
        return cls(folder.name, said["about"], said["verdict"], tuple(said["culprit_ranks"]), tuple(said["fire"]),
                   job=said.get("job"), timeout_s=said.get("timeout_s"),
                   derive=tuple(said["derive"]) if "derive" in said else None,
                   readme=readme.read_text().strip() if readme.is_file() and "derive" in said else "",
                   device=said.get("device", False), hang_after_s=said.get("hang_after_s", 4.0),
                   interval_s=said.get("interval_s", INTERVAL_S),
                   look_alikes=tuple(said.get("look_alikes", said.get("not_fire", ()))),
                   near_misses={rule: tuple(cases) for rule, cases in said.get("near_misses", {}).items()},
                   then=said.get("then"))

    def expected(self) -> dict:
        """expected.json: what the case shows and how its job starts (Case.of reads it back)."""
        said = {"about": self.about, "verdict": self.verdict, "culprit_ranks": list(self.culprits),
                "fire": list(self.fire), "look_alikes": list(self.look_alikes)}
        if self.near_misses:
            said["near_misses"] = {rule: list(cases) for rule, cases in self.near_misses.items()}
        for key, value, default in (("job", self.job, None), ("timeout_s", self.timeout_s, None),
                                    ("derive", list(self.derive) if self.derive else None, None),
                                    ("device", self.device, False), ("hang_after_s", self.hang_after_s, 4.0),
                                    ("interval_s", self.interval_s, INTERVAL_S),
                                    ("then", self.then, None)):
            if value != default:
                said[key] = value
        return said


STARTS: dict[str, Callable] = {}   # a case's job in its expected.json: {"start": one of these, "args", "options"}


def job_kind(factory: Callable) -> Callable:
    """A way to start a case's job, named in expected.json: `factory(*args, **options)` gives its start."""
    STARTS[factory.__name__] = factory
    return factory


@job_kind
def scenario(name: str, *, fault: bool = True, max_steps: int | None = None):
    def start(workdir: Path):
        s = SCENARIOS[name]
        s.prepare(workdir)
        markers = s.ready_markers(workdir) + ([s.fault_marker(workdir)] if fault else [])
        return s.command(workdir, max_steps=max_steps), markers
    return start


@job_kind
def scenario_variant(name: str, like: str, *, fault: bool = True):
    """A mode of the zoo's train.py that is no zoo scenario of its own (bz2-rewind), run as the scenario
    `like` is, on the data it prepares."""
    def start(workdir: Path):
        s = dataclasses.replace(SCENARIOS[like], name=name)
        s.prepare(workdir)
        markers = s.ready_markers(workdir) + ([s.fault_marker(workdir)] if fault else [])
        return s.command(workdir), markers
    return start


@job_kind
def stall_job(mode: str):
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "stall_job.py", "--workdir", str(workdir), "--mode", mode)
        return cmd, [workdir / "ready.0", workdir / "ready.1", workdir / "fault"]
    return start


@job_kind
def diverge_job(mode: str, nproc: int = 2):
    """A mode of tests/jobs/diverge_job.py: ranks that part ways in their own code."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "diverge_job.py", "--workdir", str(workdir), "--mode", mode, nproc=nproc)
        return cmd, [*(workdir / f"ready.{r}" for r in range(nproc)), workdir / "fault"]
    return start


@job_kind
def rules_job(mode: str, layout: str = "plain", *, fault: bool = True, fault_after: float = 6.0):
    """A mode of tests/jobs/rules_job.py; crash modes wait only for ready, so watch sees the fault."""
    def start(workdir: Path):
        data = workdir / "data"
        if layout == "bz2-rank0":   # shard i goes to rank i % 2: rank 0 draws the bz2 ones
            bz2 = make_shards(data, 2, 24, 1.0, "bz2", prefix="libri")
            plain = make_shards(data, 2, 24, 1.0, prefix="aishell")
            shards = [bz2[0], plain[0], bz2[1], plain[1]]
        else:
            shards = make_shards(data, 4, 24, 1.0, prefix="aishell")
        listing = write_list(shards, workdir / "data.list")
        (workdir / "raw.wav").write_bytes(synth_wav(1.0, seed=7))
        cmd = torchrun_cmd(JOBS / "rules_job.py", "--workdir", str(workdir), "--mode", mode,
                           "--data-list", str(listing), "--fault-after", str(fault_after))
        return cmd, [workdir / "ready.0", workdir / "ready.1"] + ([workdir / "fault"] if fault else [])
    return start


@job_kind
def exit_job(mode: str, *extra: str):
    """A mode of tests/jobs/exit_job.py: how a rank ends (crash modes wait only for ready, so watch sees it)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "exit_job.py", "--workdir", str(workdir), "--mode", mode, *extra)
        return cmd, [workdir / "ready.0", workdir / "ready.1"]
    return start


@job_kind
def restarting_job(mode: str, *extra: str):
    """A mode of tests/jobs/exit_job.py under torchrun --max-restarts=1 (the elastic agent restarts
    the ranks once after a failure)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "exit_job.py", "--workdir", str(workdir), "--mode", mode, *extra,
                           extra=("--standalone", "--max-restarts=1"))
        return cmd, [workdir / "ready.0", workdir / "ready.1"]
    return start


@job_kind
def own_waits_job(mode: str):
    """A mode of tests/jobs/own_waits_job.py: a hang in the job's own code (pdb, flock, a child, a thread)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "own_waits_job.py", "--workdir", str(workdir), "--mode", mode)
        return cmd, [workdir / "ready.0", workdir / "ready.1", workdir / "fault"]
    return start


@job_kind
def pipeline_job(mode: str, *extra: str, fault: bool = True, env: tuple[str, ...] = (), shm_mb: int | None = None,
                 cpus: float | None = None):
    """A mode of tests/jobs/pipeline_job.py: a native pool used before fork, workers' CPUs, threads,
    /dev/shm, a CPU quota; `env`: NAME=VALUE settings the job starts with; `shm_mb`: a /dev/shm of that
    size of its own (a tmpfs in a mount namespace); `cpus`: a cgroup CPU quota of that many CPUs (both
    need root, as in a container)."""
    def start(workdir: Path):
        cmd = torchrun_cmd(JOBS / "pipeline_job.py", "--workdir", str(workdir), "--mode", mode, *extra)
        cmd = ["env", *env, *cmd] if env else cmd
        if shm_mb is not None:
            cmd = own_shm(cmd, shm_mb)
        if cpus is not None:
            cmd = in_cpu_quota(cmd, cpus)
        return cmd, [workdir / "ready.0", workdir / "ready.1"] + ([workdir / "fault"] if fault else [])
    return start


def own_shm(cmd: list[str], size_mb: int) -> list[str]:
    """`cmd` in a mount namespace of its own whose /dev/shm is a tmpfs of `size_mb` MB (Docker's is 64)."""
    return ["unshare", "-m", "sh", "-c",
            f"mount -t tmpfs -o size={size_mb}m tmpfs /dev/shm && exec {shlex.join(cmd)}"]


def in_cpu_quota(cmd: list[str], cpus: float, name: str = "hangdoc-golden-quota") -> list[str]:
    """`cmd` in a cgroup of its own whose CPU quota is `cpus` CPUs (cgroup v1's cpu hierarchy, else v2)."""
    period = 100_000
    v1 = Path("/sys/fs/cgroup/cpu")
    group = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / name
    group.mkdir(exist_ok=True)
    if v1.is_dir():
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(cpus * period)))
    else:
        (group / "cpu.max").write_text(f"{int(cpus * period)} {period}")
    return ["sh", "-c", f"echo $$ > {group / 'cgroup.procs'} && exec {shlex.join(cmd)}"]


def on_aarch64(bundle: Bundle) -> Bundle:
    """The x86 segfault as a Kunpeng host shows it: aarch64, OpenMP and ACL mapped in every process."""
    arm_libs = ("/opt/arm/acl/lib/libarm_compute.so",)

    def edit(proc):
        if proc.role in (Role.RANK, Role.WORKER):
            return dataclasses.replace(proc, libs=tuple(sorted(set(proc.libs) | set(arm_libs))))
        return proc

    job = dataclasses.replace(bundle.job, processes=tuple(edit(p) for p in bundle.job.processes))
    host = dataclasses.replace(bundle.host, arch="aarch64", hostname=bundle.host.hostname + "-kunpeng")
    return dataclasses.replace(bundle, host=host, job=job)


EDITS = {"on_aarch64": on_aarch64}   # a derived case's edit of its source case's bundle, by name
CASES = [Case.of(folder) for folder in sorted(GOLDEN.iterdir()) if (folder / "expected.json").is_file()]
BY_NAME = {c.name: c for c in CASES}


def watch_cli(pid: int, out: Path, timeout_s: float | None, hang_after_s: float | None = 4.0,
              record: Path | None = None, interval_s: float = INTERVAL_S) -> Path:
    """`hangdoc watch PID ...` in a child process, as a user runs it (`record`: with --record;
    `hang_after_s` None: no --hang-after)."""
    extra = ("--timeout", str(timeout_s)) if timeout_s else ()
    extra += ("--record", str(record)) if record is not None else ()
    extra += ("--hang-after", str(hang_after_s)) if hang_after_s is not None else ()
    extra += ("--interval", str(interval_s))
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    done = subprocess.run([sys.executable, "-m", "hangdoc", "watch", str(pid), *WATCH, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    if not out.exists():
        raise RuntimeError(f"watch saved no bundle (exit {done.returncode}): {done.stderr[-2000:]}")
    return out


def watch_healthy(pid: int, out: Path, timeout_s: float, hang_after_s: float | None = 4.0,
                  record: Path | None = None, interval_s: float = INTERVAL_S) -> Path:
    """What `watch --timeout` does, keeping the bundle it does not save for a healthy job."""
    from hangdoc.bundle.files import save_bundle
    from hangdoc.bundle.recording import Recorder
    from hangdoc.live.options import WatchOptions
    from hangdoc.live.probes import make_probes
    from hangdoc.live.watcher import Watcher

    config = WatchOptions(interval_s=interval_s, hang_after_s=hang_after_s, timeout_s=timeout_s)
    recorder = Recorder.of_command(record, "watch") if record is not None else None
    try:
        outcome = Watcher(pid, make_probes(WatchOptions(gpu=False)), config, recorder=recorder).run()
    finally:
        if recorder is not None:
            recorder.close()
    return save_bundle(outcome.bundle, out)


def trim(bundle: Bundle, keep: int = KEEP_SAMPLES) -> Bundle:
    """The last `keep` samples (more if fewer change the verdict), the last lines of each log."""
    full = judge(bundle).report
    for n in range(min(keep, len(bundle.samples)), len(bundle.samples) + 1):
        cut = dataclasses.replace(bundle, samples=bundle.samples[-n:])
        report = judge(cut).report
        if (report.verdict, report.culprit_ranks) == (full.verdict, full.culprit_ranks):
            break
    seen = {s.pid for snap in cut.samples for s in snap.processes}
    job = dataclasses.replace(cut.job, processes=tuple(p for p in cut.job.processes if p.pid in seen))
    logs = tuple(LogTail(t.source, t.lines[-KEEP_LOG_LINES:]) for t in cut.logs)
    return dataclasses.replace(cut, job=job, logs=logs)


def record(case: Case, attempts: int = 3) -> Bundle:
    """Record `case`; a crash can outrun the watcher's attach, so a failed try is repeated."""
    for attempt in range(1, attempts + 1):
        try:
            return record_once(case)
        except RuntimeError as exc:
            if attempt == attempts:
                raise
            print(f"{case.name}: try {attempt} failed ({str(exc).splitlines()[0][:160]}); again", flush=True)
    raise AssertionError("unreachable")


def act(case: Case, workdir: Path) -> None:
    """Do to the ready job what the case's `then` says: a signal to a rank, by the pid its marker holds."""
    if case.then is None:
        return
    marker = workdir / f"ready.{case.then['rank']}"
    pid = marker.read_text().split()[0] if marker.is_file() else ""
    if not pid.isdigit():
        raise RuntimeError(f"{case.name}: {marker.name} holds no pid to send {case.then['signal']} to")
    os.kill(int(pid), getattr(signal, case.then["signal"]))


def record_once(case: Case) -> Bundle:
    if case.derive is not None:
        source, edit = case.derive
        return EDITS[edit](load_bundle(GOLDEN / source / "bundle.json"))
    workdir = Path(tempfile.mkdtemp(prefix=f"hangdoc-golden-{case.name}-"))
    cmd, markers = case.start(workdir)
    job: RunningJob = start_job(cmd, cwd=workdir, log_path=workdir / "job.log")
    try:
        if not wait_for(markers, job, timeout=90):
            tail = (workdir / "job.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{case.name}: the job did not reach its markers; log tail:\n{tail}")
        act(case, workdir)
        out = workdir / "bundle.json"
        if case.verdict == "healthy":
            watch_healthy(job.pid, out, case.timeout_s or 12, case.hang_after_s, interval_s=case.interval_s)
        else:
            watch_cli(job.pid, out, case.timeout_s, case.hang_after_s, interval_s=case.interval_s)
        return trim(load_bundle(out))
    finally:
        stop_job(job)
        shutil.rmtree(workdir, ignore_errors=True)


def record_replay(case: Case) -> tuple[bool, str]:
    """The case's real job watched with --record, kept in tests/replay/golden-<case>/ when its replay
    gives the case's verdict, culprits and rules (a miss is kept in a temporary directory, named)."""
    from hangdoc.live.replay import replay
    from replay_record import keep_case, keep_missed

    workdir = Path(tempfile.mkdtemp(prefix=f"hangdoc-golden-{case.name}-"))
    cmd, markers = case.start(workdir)
    job: RunningJob = start_job(cmd, cwd=workdir, log_path=workdir / "job.log")
    recording = workdir / "recording"
    try:
        if not wait_for(markers, job, timeout=90):
            return False, "the job did not reach its markers"
        act(case, workdir)
        out = workdir / "bundle.json"
        if case.verdict == "healthy":
            watch_healthy(job.pid, out, case.timeout_s or 12, case.hang_after_s, record=recording,
                          interval_s=case.interval_s)
        else:
            watch_cli(job.pid, out, case.timeout_s, case.hang_after_s, record=recording, interval_s=case.interval_s)
        report = replay(recording).report
        fired = [f.rule for f in report.findings]
        got = (str(report.verdict), tuple(report.culprit_ranks))
        if got != (case.verdict, case.culprits) or not set(case.fire) <= set(fired):
            kept = keep_missed(case.name, recording)
            return False, f"replayed {got} {fired}, not the case's; its recording: hangdoc replay {kept}"
        about = {"golden": case.name, "about": case.about, "verdict": case.verdict,
                 "culprit_ranks": list(case.culprits), "rules": list(case.fire), "look_alikes": list(case.look_alikes)}
        size = keep_case(f"golden-{case.name}", recording, about)
        return True, f"{got[0]} {list(got[1])}, {size // 1024} KiB"
    finally:
        stop_job(job)
        shutil.rmtree(workdir, ignore_errors=True)


def write_case(case: Case, bundle: Bundle) -> None:
    folder = GOLDEN / case.name
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_dict(bundle), separators=(",", ":")) + "\n"
    # The checkout's path on the recording machine, as the replay tier's recordings name it too.
    (folder / "bundle.json").write_text(text.replace(json.dumps(str(ROOT))[1:-1], CHECKOUT))
    write_expected(case)
    if case.readme:
        (folder / "README").write_text(case.readme + "\n")


def write_expected(case: Case) -> None:
    """expected.json from the case: what it shows, the verdict, the culprits, the rules that must fire
    and its look-alikes, its rules' near misses, and how its job starts (write_markdown then says
    whether the stored bundle agrees)."""
    (GOLDEN / case.name / "expected.json").write_text(json.dumps(case.expected(), indent=2) + "\n")


def write_markdown(case: Case, with_text: bool = False) -> str:
    """expected.md from the stored bundle, and expected.txt where the case keeps one (`with_text`: start one)."""
    bundle = load_bundle(GOLDEN / case.name / "bundle.json")
    report = judge(bundle).report
    text = report_markdown(report) + "\n"
    (GOLDEN / case.name / "expected.md").write_text(text)
    if (GOLDEN / case.name / "expected.txt").exists() or with_text:
        out = io.StringIO()
        render_text(report, out, width=TEXT_WIDTH, terminal=True)
        (GOLDEN / case.name / "expected.txt").write_text(out.getvalue())
    fired = sorted({f.rule for f in report.findings})
    problems = []
    if (report.verdict, report.culprit_ranks) != (case.verdict, case.culprits):
        problems.append(f"verdict {report.verdict} culprits {list(report.culprit_ranks)}")
    problems += [f"missing {r}" for r in case.fire if r not in fired]
    problems += [f"unexpected {r}" for r in fired if r not in case.fire]
    return f"{case.name}: fired {fired}" + (f"  MISMATCH: {'; '.join(problems)}" if problems else "")


DOCS = ROOT / "hangdoc" / "rules" / "pages"
_EXAMPLE = re.compile(r"<!-- example: (\S+) (\S+) -->\n(?:\n```text\n(?:(?!```)[^\n]*\n)*```\n)?")   # an empty block too


def finding_block(case: str, slug: str) -> str:
    """A golden case's finding for `slug` as plain text: title, evidence, fix."""
    bundle = load_bundle(GOLDEN / case / "bundle.json")
    found = next(f for f in judge(bundle).report.findings if f.rule == slug)
    ranks = f" (ranks {', '.join(map(str, found.ranks))})" if found.ranks else ""
    lines = [f"{found.severity.value} {found.rule}{ranks}: {found.title}"]
    lines += [f"  - {line.strip()}" for line in found.evidence]
    lines += [f"  Fix: {found.fix}"]
    return "\n".join(lines)


def write_doc_examples() -> None:
    """Fill every `<!-- example: CASE SLUG -->` in hangdoc/rules/pages/*.md with that golden finding."""
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        new = _EXAMPLE.sub(lambda m: f"<!-- example: {m[1]} {m[2]} -->\n\n```text\n"
                                     f"{finding_block(m[1], m[2])}\n```\n", text)
        if new != text:
            page.write_text(new)
            print(f"{page.relative_to(ROOT)}: examples rewritten")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    parser.add_argument("--markdown-only", action="store_true", help="rewrite expected.md and expected.txt from stored bundles")
    parser.add_argument("--expected-only", action="store_true",
                        help="rewrite the stored cases' expected.json from CASES (then their reports)")
    parser.add_argument("--docs", action="store_true", help="rewrite the examples in hangdoc/rules/pages/*.md")
    parser.add_argument("--text", action="store_true",
                        help="write expected.txt too (the text report), where the case keeps none yet")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--replay", action="store_true",
                        help="record each real case's watch (--record) into tests/replay/golden-<case>/")
    args = parser.parse_args(argv)
    chosen = [BY_NAME[name] for name in args.cases] if args.cases else CASES
    if args.replay:
        missed = 0
        for case in chosen:
            if case.derive is not None or case.device or case.start is None:
                continue
            ok, said = record_replay(case)
            missed += not ok
            print(f"{'kept  ' if ok else 'MISSED'} golden-{case.name}: {said}", flush=True)
        return 1 if missed else 0
    if args.docs:
        write_doc_examples()
        return 0
    if args.list:
        for case in CASES:
            kind = "derived" if case.derive else "device" if case.device else "real" if case.job else "by hand"
            print(f"{case.name:24} {kind:8} {case.verdict:8} fire={','.join(case.fire) or '-'}")
        return 0
    for case in chosen:
        stored_only = args.markdown_only or args.expected_only
        if stored_only and not (GOLDEN / case.name / "bundle.json").exists():
            print(f"{case.name}: not recorded yet")
            continue
        if args.expected_only:
            write_expected(case)
        elif case.device and not args.markdown_only:
            print(f"{case.name}: recorded on a GPU machine (tests/gpu/device_check.py); its reports rewritten")
        elif case.start is None and case.derive is None and not args.markdown_only:
            print(f"{case.name}: recorded by hand (its README.md says how); its reports rewritten")
        elif not args.markdown_only:
            started = time.monotonic()
            write_case(case, record(case))
            print(f"{case.name}: recorded in {time.monotonic() - started:.0f} s", flush=True)
        print(write_markdown(case, args.text), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
