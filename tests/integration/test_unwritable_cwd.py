"""`watch` started in a directory that takes no file (removed while hangdoc ran there: as a
read-only checkout, even root cannot write it) saves its default bundle in the system's temporary
directory and says where, in one line; an --out there that cannot be written stays an error,
found before the capture (issue 37, item 6)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import hangdoc_cmd
from hangdoc.base.errors import EXIT_USAGE
from hangdoc.bundle.files import load_bundle
from hangdoc.live.proc import RunningJob, start_job, stop_job

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

RANK = "import time\nwhile True: time.sleep(0.2)\n"


def _in_a_removed_directory(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """hangdoc ARGS run with its working directory removed under it; $TMPDIR is tmp_path/tmp."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    script = 'mkdir -p "$1" && cd "$1" && rmdir "$1" && shift && exec "$@"'
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), NO_COLOR="1", COLUMNS="200")
    return subprocess.run(["sh", "-c", script, "sh", str(tmp_path / "here"), *hangdoc_cmd(), *args],
                          capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path)


@pytest.fixture
def rank(tmp_path) -> RunningJob:
    """GIVEN a Python process that names its rank in its environment; ended whatever happens."""
    job = start_job([sys.executable, "-c", RANK], cwd=tmp_path, env={"RANK": "0", "WORLD_SIZE": "1"})
    yield job
    stop_job(job)


def test_a_default_bundle_goes_to_the_temporary_directory_when_the_current_one_takes_no_file(rank, tmp_path):
    # WHEN `hangdoc watch --once` runs with no --out in a directory that takes no file
    done = _in_a_removed_directory(tmp_path, "watch", str(rank.popen.pid), "--once", "--no-gpu")
    # THEN it captures, exit 0, and one line says where the bundle goes
    assert done.returncode == 0, done.stderr
    saved = list((tmp_path / "tmp").glob("hangdoc-*.json.zst"))
    assert len(saved) == 1, (done.stderr, os.listdir(tmp_path / "tmp"))
    said = [line for line in done.stderr.splitlines() if "current directory" in line]
    assert said == [f"hangdoc: the current directory cannot be written (No such file or directory); "
                    f"the bundle will be saved to {saved[0]}"], done.stderr
    assert [p.rank for p in load_bundle(saved[0]).job.ranks] == [0]


def test_an_out_given_in_a_directory_that_takes_no_file_is_an_error_before_the_capture(rank, tmp_path):
    # WHEN --out names a file in that directory
    done = _in_a_removed_directory(tmp_path, "watch", str(rank.popen.pid), "--once", "--no-gpu", "--out", "b.json.zst")
    # THEN it is refused at once, exit 2, with the reason; nothing goes to the temporary directory
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "cannot write --out b.json.zst: No such file or directory in ." in done.stderr
    assert not list((tmp_path / "tmp").glob("hangdoc-*"))
