"""What a user reads when a stack cannot be read: one line that says why and what to do, never
py-spy's own Rust backtrace."""
from __future__ import annotations

from hangdoc.collect.stacks import classify_failure

# What py-spy 0.4 printed for a rank stopped by SIGSTOP (from a real run of the ordinary jobs).
STOPPED = ("Error: Failed to get stack traces\n\nCaused by:\n    0: Failed to suspend process\n    1: unexpected "
           "waitpid result PtraceEvent(Pid(10353), SIGSTOP, 128) to 10353\n\nStack backtrace:\n   0: <E as "
           "anyhow::context::ext::StdError>::ext_context\n   1: py_spy::python_spy::PythonSpy::get_stack_traces\n")


def test_a_stopped_process_is_said_to_be_stopped_with_the_way_to_resume_it():
    # GIVEN py-spy's failure on a process in state T WHEN classified
    error = classify_failure(10353, STOPPED, tracer=None, state="T")
    # THEN it says stopped, how to resume it, and none of the Rust backtrace
    assert error.kind == "stopped"
    assert "kill -CONT 10353" in str(error) and "stopped" in str(error)
    assert "anyhow" not in str(error) and "Stack backtrace" not in str(error)


def test_other_failures_lose_the_rust_backtrace_too():
    error = classify_failure(42, "Error: something odd\n\nStack backtrace:\n   0: py_spy::main\n", state="S")
    assert error.kind == "failed" and str(error).endswith("Error: something odd")


def test_a_process_root_cannot_read_is_not_blamed_on_the_user():
    from hangdoc.base.errors import ProcessNotReadable

    # GIVEN /proc/PID/environ refused WHEN hangdoc runs as root THEN it does not say "run as root"
    as_root = str(ProcessNotReadable(1, as_root=True))
    assert "even to root" in as_root and "as root" not in as_root.replace("even to root", "")
    # and as another user it says whose process it is and how to get there
    assert "Run hangdoc as the job's user" in str(ProcessNotReadable(1, as_root=False))


def test_a_gentle_read_goes_without_native_frames_which_py_spy_reads_only_paused():
    # GIVEN a watch with --native that reads a stepping rank without pausing it
    import json as _json
    import subprocess as _sp

    from hangdoc.collect.stacks import PySpy

    seen = []

    def run(cmd, **kwargs):
        seen.append(cmd)
        return _sp.CompletedProcess(cmd, 0, _json.dumps([]), "")
    pyspy = PySpy("/usr/bin/py-spy", run=run)
    # WHEN it reads one rank gently and one paused
    pyspy.dump(1234, native=True, nonblocking=True)
    pyspy.dump(1235, native=True, nonblocking=False)
    # THEN py-spy is never asked for both (it refuses: "Can't get native stack traces with the
    # --nonblocking option", and the rank had no stack at all), and the paused read has native frames
    assert "--native" not in seen[0] and "--nonblocking" in seen[0]
    assert "--native" in seen[1] and "--nonblocking" not in seen[1]


def test_watch_as_root_on_a_process_root_may_not_read_never_says_run_as_root(capsys, monkeypatch, tmp_path):
    import os

    from hangdoc.cli import main
    from hangdoc.collect.procfs import ProcDenied, ProcFS

    # GIVEN hangdoc running as root, and a pid whose environment even root is refused (another container's)
    def refused(self, pid):
        raise ProcDenied(pid)

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(ProcFS, "environ", refused)
    # WHEN `hangdoc watch 1` attaches
    rc = main(["watch", "1", "--once", "--no-gpu", "--out", str(tmp_path / "b.json")])
    err = capsys.readouterr().err.strip().splitlines()
    # THEN one line, exit 2, that does not tell root to run as root
    assert rc == 2 and len(err) == 1 and err[0].startswith("hangdoc: error: "), err
    assert "even to root" in err[0] and "or as root" not in err[0]


def test_a_stopped_rank_reads_stopped_in_the_report_with_how_to_resume_it():
    import dataclasses
    import io
    from pathlib import Path

    from hangdoc.bundle.files import load_bundle
    from hangdoc.model import Role
    from hangdoc.render.text import render_text
    from hangdoc.report import judge

    # GIVEN a 2-rank job whose rank 1 was SIGSTOPped before the watch (state T in every sample), py-spy
    # failing on it as it does, and the capture recording its failure as the collector words it
    bundle = load_bundle(Path(__file__).resolve().parents[1] / "golden" / "barrier-mismatch" / "bundle.json")
    pid = bundle.job.by_role(Role.RANK)[1].pid
    failure = f"stack: could not collect: {classify_failure(pid, STOPPED.replace('10353', str(pid)))}"
    samples = tuple(dataclasses.replace(snap, processes=tuple(
        dataclasses.replace(p, proc=dataclasses.replace(p.proc, state="T"), stack=None, errors=(failure,))
        if p.pid == pid else p for p in snap.processes)) for snap in bundle.samples)
    # WHEN its report is drawn
    out = io.StringIO()
    render_text(judge(dataclasses.replace(bundle, samples=samples)).report, out)
    text = out.getvalue()
    # THEN rank 1 is said to be stopped (SIGSTOP), with the command that resumes it, and no Rust backtrace
    assert "stopped (SIGSTOP)" in text and f"kill -CONT {pid}" in text, text
    assert "anyhow" not in text and "Stack backtrace" not in text
    # AND its row in the ranks table says so, not a bare "idle"
    row = next(line for line in text.splitlines() if line.startswith("1 ") and str(pid) in line)
    assert "stopped (SIGSTOP)" in row, row
