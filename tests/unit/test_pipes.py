"""Who holds a pipe's write end (collect/pipes.py), over a /proc tree written under tmp_path: the
read's descriptor from /proc/PID/syscall, the holders from every process's links and fdinfo flags,
and a reading kept while the node's processes stay the same."""
from __future__ import annotations

import os

from hangdoc.collect.pipes import KEEP_SCANS, PipeScan, pipe_read_of, pipe_writers
from hangdoc.collect.procfs import ProcFS
from hangdoc.model import PipeEnd

PIPE = "pipe:[88123]"


def process(root, pid: int, fds: dict[int, tuple[str, int]], syscall: str = "running") -> None:
    """/proc/PID with its descriptors: fd -> (link target, fdinfo flags, octal as the kernel writes them)."""
    (root / str(pid) / "fd").mkdir(parents=True)
    (root / str(pid) / "fdinfo").mkdir()
    (root / str(pid) / "syscall").write_text(syscall + "\n")
    for fd, (target, flags) in fds.items():
        os.symlink(target, root / str(pid) / "fd" / str(fd))
        (root / str(pid) / "fdinfo" / str(fd)).write_text(f"pos:\t0\nflags:\t{flags:o}\nmnt_id:\t16\n")


def test_the_pipe_read_and_every_process_holding_its_write_end_are_found(tmp_path):
    # GIVEN a reader asleep in read(2) on fd 5 (pipe:[88123]) holding the write end too (fd 6), a child
    # holding it read-write (fd 1), a process holding only a read end, and one of another pipe
    process(tmp_path, 10, {5: (PIPE, 0o2000000), 6: (PIPE, 0o2000001)}, "0 0x5 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f01")
    process(tmp_path, 11, {1: (PIPE, 0o2)})
    process(tmp_path, 12, {3: (PIPE, 0o0)})
    process(tmp_path, 13, {4: ("pipe:[99]", 0o1)})
    procfs = ProcFS(tmp_path, arch="x86_64")
    # WHEN the reader's pipe and its writers are read
    read = pipe_read_of(procfs, 10)
    found, unread = pipe_writers(procfs, {read.target})
    # THEN the read is on fd 5, and the writers are the reader's fd 6 and the child's fd 1, nobody else
    assert (read.fd, read.target) == (5, PIPE)
    assert found == {PIPE: (PipeEnd(10, 6), PipeEnd(11, 1))} and unread == 0


def test_a_read_that_is_no_pipe_read_names_no_pipe(tmp_path):
    # GIVEN a process in read(2) on a regular file's descriptor, and one in another call (futex)
    process(tmp_path, 10, {3: (str(tmp_path / "data.bin"), 0o0)}, "0 0x3 0x7f00 0x10000 0x0 0x0 0x0 0x7ffd 0x7f01")
    (tmp_path / "data.bin").write_bytes(b"x")
    process(tmp_path, 11, {5: (PIPE, 0o0)}, "202 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f01")
    procfs = ProcFS(tmp_path, arch="x86_64")
    # WHEN read THEN neither names a pipe
    assert pipe_read_of(procfs, 10) is None and pipe_read_of(procfs, 11) is None


def test_a_reading_is_kept_while_the_node_is_the_same_and_read_again_when_a_process_starts(tmp_path):
    # GIVEN the reader alone holding its write end, read once
    process(tmp_path, 10, {5: (PIPE, 0o0), 6: (PIPE, 0o1)})
    procfs, scan = ProcFS(tmp_path, arch="x86_64"), PipeScan()
    assert scan.writers(procfs, {PIPE}) == ({PIPE: (PipeEnd(10, 6),)}, 0)
    # WHEN the reader's own write end goes from its table (the next capture may keep the reading)
    os.unlink(tmp_path / "10" / "fd" / "6")
    kept = scan.writers(procfs, {PIPE})
    # and then a child forked from it appears, holding the write end
    process(tmp_path, 20, {6: (PIPE, 0o1)})
    again = scan.writers(procfs, {PIPE})
    # THEN the kept reading names a holder too many (it never proves a pipe unwritable), and a new
    # process makes the node read again
    assert kept == ({PIPE: (PipeEnd(10, 6),)}, 0)
    assert again == ({PIPE: (PipeEnd(20, 6),)}, 0)
    # and a reading is read again after KEEP_SCANS captures, the node unchanged
    os.unlink(tmp_path / "20" / "fd" / "6")
    for _ in range(KEEP_SCANS):
        last = scan.writers(procfs, {PIPE})
    assert last == ({PIPE: ()}, 0)
