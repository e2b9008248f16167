"""Shared fixtures: real torchrun jobs that signal readiness and are always killed."""
from __future__ import annotations

import os
import re
import signal
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

JOBS = Path(__file__).parent / "jobs"
# A round's status line (stderr off a terminal): with its clock where every rank fits beside it,
# "hangdoc #N" where the line had to shrink (render/live.py: status_line).
STATUS_LINE = re.compile(r"hangdoc(?:: \d\d:\d\d:\d\d sample | #)\d+ ")

PLANTED_SECRETS = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "HF_TOKEN": "hf_PlantedTokenAbcdefGhijkLmnop1234",
    "DB_PASSWORD": "correct-horse-battery-staple-42",
    "TORCH_HUB_TOKEN": "PlantedHubSecretValue9876",
}
CMDLINE_SECRET = "hf_CmdlineTokenQrstuVwxyz5678Abcd"

# A real job whose verdict a recorded watch holds in the replay tier (tests/replay/<case>/,
# tests/unit/test_replay_tier.py) runs live only with HANGDOC_LIVE_VERDICTS=1 (`make live`):
# `make test` keeps real jobs for what only a real job shows (attach, signals, teardown, launchers).
LIVE_VERDICTS = os.environ.get("HANGDOC_LIVE_VERDICTS") == "1"


def replayed(*cases: str):
    """Skip this real-job test in `make test`: its verdict is the replay tier's `cases`' (a unit test
    keeps every case named here recorded)."""
    return pytest.mark.skipif(not LIVE_VERDICTS, reason=f"its verdict is replayed in the tier ({', '.join(cases)}); "
                              "live with HANGDOC_LIVE_VERDICTS=1 (make live)")


@pytest.fixture
def probe_job(tmp_path):
    """GIVEN a real 2-rank gloo torchrun job, 2 DataLoader workers per rank, secrets in its env."""
    started = []

    def start(*extra: str):
        data = tmp_path / "data.bin"
        with open(data, "wb") as f:
            f.truncate(64 << 20)
        cmd = torchrun_cmd(JOBS / "probe_job.py", "--workdir", str(tmp_path), "--data", str(data),
                           "--hf-token", CMDLINE_SECRET, *extra)
        job = start_job(cmd, cwd=tmp_path, env=PLANTED_SECRETS, log_path=tmp_path / "job.log")
        started.append(job)
        ready = [tmp_path / "ready.0", tmp_path / "ready.1"]
        if not wait_for(ready, job, timeout=60):
            log = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"job did not become ready; log tail:\n{log}")
        job.refresh_tree()
        return job

    yield start
    for job in started:
        stop_job(job)


def hangdoc_cmd() -> list[str]:
    return [sys.executable, "-m", "hangdoc"]


def mode_jobs(tmp_path: Path, script: Path, timeout: float = 60, outlive_check: bool = False):
    """`start(mode, *extra, wait_fault=True, env=())` for a 2-rank job of tests/jobs/ that writes
    WORKDIR/ready.r and WORKDIR/fault (`env`: NAME=VALUE settings it starts with); a generator for a fixture to yield from: every job started is ended after the
    test (with `outlive_check`, no process of it may outlive that)."""
    started = []

    def start(mode: str, *extra: str, wait_fault: bool = True, env: tuple[str, ...] = ()):
        cmd = torchrun_cmd(script, "--workdir", str(tmp_path), "--mode", mode, *extra)
        cmd = ["env", *env, *cmd] if env else cmd
        job = start_job(cmd, cwd=tmp_path, log_path=tmp_path / "job.log")
        started.append(job)
        markers = [tmp_path / "ready.0", tmp_path / "ready.1"] + ([tmp_path / "fault"] if wait_fault else [])
        if not wait_for(markers, job, timeout=timeout):
            log = (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            pytest.fail(f"job did not reach its markers; log tail:\n{log}")
        return job

    yield start
    for job in started:
        end_job(job, outlive_check)


def end_job(job, outlive_check: bool = True) -> None:
    """Stop the whole job, pass or fail; with `outlive_check`, no process of it may outlive that."""
    import psutil

    stop_job(job)
    if outlive_check:
        left = [p for p in job.procs.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        assert not left, f"processes of the job outlived it: {left}"


@pytest.fixture
def stall_job(tmp_path):
    """GIVEN a real 2-rank gloo job that stalls in the chosen --mode (tests/jobs/stall_job.py)."""
    yield from mode_jobs(tmp_path, JOBS / "stall_job.py")


def run_hangdoc(*args: str, timeout: float = 120) -> "subprocess.CompletedProcess":
    import subprocess

    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    args = _with_record(args)
    return subprocess.run([*hangdoc_cmd(), *args], capture_output=True, text=True, timeout=timeout, env=env)


# HANGDOC_RECORD_TIER=1: every `watch` or `run` a real-job test starts through run_hangdoc is
# recorded (--record), and once the test has passed (its asserts held the job's ground truth) its
# recording joins the replay tier as tests/replay/live-<test>/, with the verdict it replays to.
RECORD_TIER = os.environ.get("HANGDOC_RECORD_TIER") == "1"
_TIER: dict = {"test": None, "recordings": []}


def recorded(command: str) -> tuple:
    """`watch` or `run` and, with HANGDOC_RECORD_TIER=1, its --record for the tier."""
    return _with_record((command,))


def _with_record(args: tuple) -> tuple:
    if not (RECORD_TIER and _TIER["test"] is not None and args and args[0] in ("watch", "run")) \
            or "--once" in args or "--record" in args:
        return args
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="hangdoc-tier-")) / "recording"
    _TIER["recordings"].append(where)
    return (args[0], "--record", str(where), *args[1:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.tier_passed = report.passed


@pytest.fixture(autouse=True)
def _record_for_the_tier(request):
    if not RECORD_TIER:
        yield
        return
    _TIER["test"], _TIER["recordings"] = request.node.nodeid, []
    yield
    recordings, _TIER["test"] = list(_TIER["recordings"]), None
    if not getattr(request.node, "tier_passed", False):
        return
    for n, where in enumerate(r for r in recordings if (r / "recording.zst").exists()):
        _keep_for_the_tier(request.node, where, n)


def _keep_for_the_tier(node, where: Path, n: int) -> None:
    from hangdoc.base.errors import BadBundle
    from hangdoc.live.replay import replay
    from replay_record import keep_case

    try:
        report = replay(where).report
    except BadBundle:       # nothing was watched (a command that ended before its first round)
        return
    name = re.sub(r"[^a-z0-9]+", "-", f"{Path(node.fspath).stem[5:]}-{node.name[5:]}".lower()).strip("-")[:90]
    rules = sorted({f.rule for f in report.findings if f.severity.value in ("critical", "warning")})
    about = {"test": node.nodeid, "about": "a real-job test's watch; the test asserted its ground truth when recorded",
             "verdict": str(report.verdict), "culprit_ranks": list(report.culprit_ranks), "rules": rules}
    keep_case(f"live-{name}{f'-{n + 1}' if n else ''}", where, about)


FAKE_NVML_SOURCE = Path(__file__).resolve().parent / "fakenvml" / "fake_nvml.c"


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fakenvml/fake_nvml.c built into a shared library, once per session.

    Point $FAKE_NVML_CONFIG at a config file before nvmlInit to say which GPUs it reports.
    """
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed, so the fake NVML library cannot be built")
    library = tmp_path_factory.mktemp("fakenvml") / "libfake_nvml.so"
    build = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O1", "-Wall", "-o", str(library), str(FAKE_NVML_SOURCE)],
        capture_output=True, text=True,
    )
    if build.returncode != 0:
        pytest.fail(f"could not build the fake NVML library:\n{build.stderr}")
    return library


def ctrl_c_reaches_it() -> None:
    """In a child before it runs: Ctrl-C (SIGINT) as a terminal delivers it. A suite started in the
    background (`make test &`, some CI runners) ignores SIGINT, and an ignored signal is inherited:
    hangdoc would then rightly never see the Ctrl-C these tests send."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Watch:
    """`hangdoc watch` as a real process; its stderr read line by line as it comes."""

    def __init__(self, pid: int, out, *extra: str):
        env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
        args = _with_record(("watch", str(pid), "--interval", "0.5", "--no-live", "--no-gpu", "--format", "json",
                             "--out", str(out), *extra))
        self.proc = subprocess.Popen([*hangdoc_cmd(), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     preexec_fn=ctrl_c_reaches_it)
        self.err: list[str] = []
        self._reader = threading.Thread(target=lambda: self.err.extend(iter(self.proc.stderr.readline, "")),
                                        daemon=True)
        self._reader.start()

    def wait_for_samples(self, count: int = 1, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(bool(STATUS_LINE.match(line)) for line in self.err) >= count:
                return
            assert self.proc.poll() is None, "".join(self.err)
            time.sleep(0.1)
        pytest.fail("no sample in time: " + "".join(self.err))

    def finish(self, timeout: float = 90):
        out = self.proc.stdout.read()
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc, out, "".join(self.err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
