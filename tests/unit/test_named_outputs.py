"""Never harm, never lose: every file hangdoc writes by name (the bundle, `report -o`, `--html`,
`run --junit`, the GitHub step summary) is a regular file written whole with mode 0600; a device,
a FIFO, a socket or a symbolic link is refused by its type before anything is opened; and a
report that cannot reach stdout (a full device, a closed descriptor, SIGTERM) is one line and
its documented exit code, never a traceback."""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hangdoc.base.errors import BadOutput
from hangdoc.bundle.files import load_bundle, save_bundle
from hangdoc.cli import main

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "tests" / "golden" / "barrier-mismatch" / "bundle.json"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")


def hangdoc(*args: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="120", PYTHONPATH=str(ROOT))
    env.pop("GITHUB_STEP_SUMMARY", None)
    env.update(kw.pop("env", {}))
    kw.setdefault("capture_output", True)
    return subprocess.run([sys.executable, "-m", "hangdoc", *args], text=True, env=env, timeout=timeout, **kw)


def null_device(where: Path) -> Path:
    """A character device with /dev/null's numbers, made in `where` (so the test harms no real node)."""
    node = where / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return node


def full_device(where: Path) -> Path:
    node = where / "full"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    return node


@AS_ROOT
def test_a_bundle_is_never_saved_over_a_device_node(tmp_path):
    # GIVEN a device node named as the bundle's --out (as root `--out /dev/null` replaced /dev/null)
    node = null_device(tmp_path)
    # WHEN the bundle is saved there
    with pytest.raises(BadOutput, match="character device"):
        save_bundle(load_bundle(BUNDLE), node)
    # THEN the node is still the device, and nothing else was left in its directory
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]


@AS_ROOT
def test_watch_refuses_a_device_out_before_the_capture(tmp_path, capsys):
    # GIVEN `watch --once --out <a device node>`
    node = null_device(tmp_path)
    # WHEN it starts THEN one line naming what the file is, exit 2, and the node is left as it was
    assert main(["watch", "4242", "--once", "--out", str(node)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "character device" in err[0], err
    assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_report_o_does_not_write_through_a_symbolic_link(tmp_path):
    # GIVEN `report -o link` where link points at another file (someone else's choice of target)
    target = tmp_path / "target.txt"
    target.write_text("precious\n")
    link = tmp_path / "report.txt"
    link.symlink_to(target)
    # WHEN the report is written
    done = hangdoc("report", str(BUNDLE), "-o", str(link))
    # THEN it is refused in one line that teaches the fix, and the target is untouched
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "symbolic link" in lines[0] and str(target) in lines[0], lines
    assert target.read_text() == "precious\n" and link.is_symlink()


@pytest.mark.parametrize("option", ["-o", "--html"])
def test_report_files_are_written_0600_whatever_the_umask(tmp_path, option):
    # GIVEN a umask of 022 (files would be 0644: readable by every user of the node)
    out = tmp_path / "report.out"
    args = ["report", str(BUNDLE), "-o", str(out)] if option == "-o" else []
    old = os.umask(0o022)
    try:
        if option == "-o":
            done = hangdoc(*args)
            assert done.returncode == 3, done.stderr
        else:
            from hangdoc.cli.common import html_target, write_html
            from hangdoc.report import judge

            write_html(judge(load_bundle(BUNDLE)).report, html_target(out))
    finally:
        os.umask(old)
    # THEN the file is its owner's alone, as bundles are
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert out.read_text()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_html_refuses_a_fifo_or_a_socket_before_the_watch(tmp_path, kind):
    # GIVEN --html naming a FIFO (writing it would block for ever) or a socket
    path = tmp_path / "page.html"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    from hangdoc.cli.common import html_target

    # WHEN it is checked THEN it is refused by its type
    with pytest.raises(BadOutput, match="FIFO|socket"):
        html_target(path)


@AS_ROOT
def test_run_junit_on_a_full_device_is_refused_up_front(tmp_path):
    # GIVEN `run --junit <a /dev/full node>`
    node = full_device(tmp_path)
    # WHEN the run starts THEN one line, exit 2, no traceback, and the command never ran
    marker = tmp_path / "ran"
    done = hangdoc("run", "--no-gpu", "--out", str(tmp_path / "b.json"), "--junit", str(node), "--",
                   sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "character device" in done.stderr
    assert not marker.exists()


def test_sigterm_during_report_exits_143_with_one_line(monkeypatch, capsys):
    # GIVEN `hangdoc report` reading its bundle when SIGTERM arrives
    import hangdoc.inputs.evidence

    def slow_inputs(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.1) if hasattr(signal, "sigtimedwait") else None
        raise AssertionError("SIGTERM was not delivered")

    monkeypatch.setattr(hangdoc.inputs.evidence, "report_inputs", slow_inputs)
    old = signal.getsignal(signal.SIGTERM)
    try:
        rc = main(["report", str(BUNDLE)])
    finally:
        signal.signal(signal.SIGTERM, old)
    # THEN it exits 143 as documented, and says it was interrupted
    assert rc == 143
    assert capsys.readouterr().err.strip() == "hangdoc: interrupted"


def test_report_to_a_full_device_is_one_line_and_exit_2(tmp_path):
    # GIVEN `hangdoc report B > /dev/full`
    with open("/dev/full", "w") as full:
        done = hangdoc("report", str(BUNDLE), stdout=full, stderr=subprocess.PIPE, capture_output=False)
    # THEN one line that says the report was not written, exit 2, no traceback
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("hangdoc: error: ") and "stdout" in lines[0], lines


def test_report_with_stdout_closed_is_one_line_and_exit_2(tmp_path):
    # GIVEN `hangdoc report B >&-`: no stdout at all
    done = hangdoc("report", str(BUNDLE), stdout=None, stderr=subprocess.PIPE, capture_output=False,
                   preexec_fn=lambda: os.close(1))
    # THEN one line, exit 2, no traceback
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("hangdoc: error: ") and "stdout" in lines[0], lines


def test_a_fifo_as_github_step_summary_never_blocks_a_run(tmp_path):
    # GIVEN GITHUB_STEP_SUMMARY naming a FIFO nobody reads, and a command that fails
    fifo = tmp_path / "summary"
    os.mkfifo(fifo)
    # WHEN hangdoc run finishes (it used to print the report and then block for ever)
    done = hangdoc("run", "--no-gpu", "--out", str(tmp_path / "b.json"), "--", sys.executable, "-c",
                   "raise SystemExit(1)", env={"GITHUB_STEP_SUMMARY": str(fifo)}, cwd=tmp_path, timeout=60)
    # THEN it ends with the command's verdict, and one line says the summary was not written
    assert done.returncode == 4, done.stderr
    assert "GITHUB_STEP_SUMMARY" in done.stderr and "FIFO" in done.stderr and "Traceback" not in done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_the_step_summary_is_appended_only_to_a_regular_file(tmp_path):
    # GIVEN a summary file that already holds an earlier step's text
    from hangdoc.base.outputs import append_output

    summary = tmp_path / "summary.md"
    summary.write_text("earlier\n")
    # WHEN hangdoc appends THEN the earlier text stays and the new text follows it
    append_output(summary, "## hangdoc\n", "GITHUB_STEP_SUMMARY")
    assert summary.read_text() == "earlier\n## hangdoc\n"
