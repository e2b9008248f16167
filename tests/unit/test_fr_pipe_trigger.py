"""The Flight Recorder dump trigger writes only into a FIFO: a regular file or a symbolic link at
the pipe's path (`TORCH_NCCL_DEBUG_INFO_PIPE_FILE` + rank + `.pipe`) is the choice of whoever can
write there, and is left alone and said in `flight_errors`."""
from __future__ import annotations

import os

from hangdoc.collect.flight_recorder import fr_config
from hangdoc.live.flight import collect_dumps
from hangdoc.model import ProcessInfo, Role


def rank_config(tmp_path, rank: int):
    info = ProcessInfo(pid=100 + rank, ppid=1, role=Role.RANK, cmdline=("python", "train.py"), exe=None, start_time=0.0, rank=rank,
                       env={"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "fr_"),
                            "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "dump_")})
    return fr_config(info)


def test_a_regular_file_or_a_link_at_the_pipe_path_is_never_written(tmp_path):
    # GIVEN rank 0's pipe path is a regular file, rank 1's a link to a file elsewhere
    (tmp_path / "fr_0.pipe").write_text("precious\n")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("precious\n")
    (tmp_path / "fr_1.pipe").symlink_to(elsewhere)
    configs = [rank_config(tmp_path, 0), rank_config(tmp_path, 1)]
    assert all(c.pipe_exists for c in configs)
    # WHEN hangdoc asks the ranks for a dump
    records, errors = collect_dumps(configs, wait_s=0.1)
    # THEN neither file changed, and each is one line in flight_errors saying why it was left alone
    assert (tmp_path / "fr_0.pipe").read_text() == "precious\n" and elsewhere.read_text() == "precious\n"
    assert records == ()
    assert len(errors) == 2 and all("not a FIFO" in line for line in errors), errors
    assert "a regular file" in errors[0] and "a symbolic link" in errors[1]


def test_a_fifo_at_the_pipe_path_is_written(tmp_path):
    # GIVEN rank 0's pipe path is a FIFO that a reader (the rank's watchdog) holds open
    fifo = tmp_path / "fr_0.pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        # WHEN hangdoc asks for a dump
        records, errors = collect_dumps([rank_config(tmp_path, 0)], wait_s=0.1)
        got.append(os.read(reader_fd, 16))
    finally:
        os.close(reader_fd)
    # THEN the FIFO got the trigger and nothing was refused
    assert got == [b"1\n"] and errors == ()
