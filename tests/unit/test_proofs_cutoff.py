"""The two proofs of a wait cut off from what would end it (analyze/cutoff.py): a read on a pipe no
process can write (pipe-no-writer), and a collective whose peer left (peer-gone). Each over a built
bundle with its look-alikes, and over real processes: a reader holding its own write end, a child
whose stdin its waiting parent holds, a peer whose connection was closed."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import pytest

from hangdoc.analyze.proofs import PROOF_SPAN_S
from hangdoc.bundle.files import load_bundle, load_head
from hangdoc.collect.procfs import ProcFS
from hangdoc.collect.snapshot import Probes, capture
from hangdoc.model import (
    BUNDLE_SCHEMA, PID_STRIDE, Bundle, Host, Job, Options, PipeEnd, PipeRead, ProcessInfo, ProofKind, Role, Stack,
    Thread, Verdict,
)
from hangdoc.render.words import proof_line
from hangdoc.report.judge import judge
from tests.factories import (
    ALL_REDUCE, PEER_RANK0, PEER_RANK1, PIPE, PIPE_CHILD, PIPE_RANK1, PIPE_WORKER, REMOTE_PEER, peer_bundle, pipe_bundle,
    save_node, wait_until,
)
from tests.unit.test_proofs import (
    LEARNED, assert_named_at_second_agreeing_sample, edit, first_hang, golden, rank_pid, with_proc,
)


def reported(bundle, at: int):
    return judge(dataclasses.replace(bundle, samples=bundle.samples[:at + 1]), hang_after=LEARNED).report


# --- pipe-no-writer: must fire -------------------------------------------------------------------


@pytest.mark.parametrize("shape, reader, words, rule", [
    (dict(writer="self"), PIPE_WORKER,
     [f"rank 1's DataLoader worker 0 (pid {PIPE_WORKER}) reads {PIPE} (its fd 5) at decode_clip (data.py:40)",
      "no process but itself holds its write end (fd 6): it can never see the end of the pipe; rank 1 waits for its data"],
     "dataloader-stall"),
    (dict(reader="child"), PIPE_CHILD,
     [f"rank 1's child process (pid {PIPE_CHILD}) reads {PIPE} (its fd 0)",
      f"held only by rank 1 (pid {PIPE_RANK1}), fd 9, asleep at save_audio (train.py:140) waiting for it to exit"],
     "child-process-wait"),
])
def test_a_read_on_a_pipe_no_process_can_write_is_named_at_the_second_agreeing_sample(shape, reader, words, rule):
    # GIVEN rank 1's worker asleep reading a pipe whose write end it alone holds; or rank 1 in Popen.wait
    # for its child, which reads its stdin (a pipe) whose write end only rank 1 holds
    bundle = pipe_bundle(**shape)
    # WHEN the watch judges each round
    at, diagnosis = first_hang(bundle)
    # THEN a proven hang at the second sample showing it, rank 1 the culprit, the reader the process it holds of
    assert at is not None
    assert_named_at_second_agreeing_sample(bundle, at, diagnosis, ProofKind.PIPE_NO_WRITER, 1)
    assert diagnosis.proof.pid == reader
    # and the report names the reader, the pipe, its line, its holders and the fact
    report = reported(bundle, at)
    assert all(w in proof_line(report) for w in words), proof_line(report)
    # and the rule that shows what the reader waits for fires, with its holders
    found = next(f for f in report.findings if f.rule == rule)
    assert any("whose write end is held by" in line for line in found.evidence)


def test_processes_hangdoc_could_not_read_are_said_in_the_proof():
    # GIVEN the worker alone holding its pipe's write end, among the processes it could read; three
    # processes of another user could not be read
    bundle = edit(pipe_bundle(writer="self"), PIPE_WORKER, lambda s, i: with_proc(
        s, pipe_read=dataclasses.replace(s.proc.pipe_read, unread=3)) if s.proc.pipe_read else s)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN proven, and the proof says what it could not see
    assert at is not None and diagnosis.proof.kind == ProofKind.PIPE_NO_WRITER
    assert "(3 processes of other users could not be read, and are taken not to hold it)" in diagnosis.proof.said


def test_a_fifo_whose_path_is_gone_reads_as_a_pipe():
    # GIVEN the worker reading a FIFO that is no longer in any directory, holding its write end alone
    bundle = pipe_bundle(writer="fifo-deleted")
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN proven: no process can open it anew
    assert at is not None and diagnosis.proof.kind == ProofKind.PIPE_NO_WRITER
    assert "reads /tmp/clips.fifo (deleted)" in diagnosis.proof.said


def test_a_pipe_read_through_a_renumbered_merge_names_its_holder():
    # GIVEN the worker's bundle as a merge numbers it (every pid of the node moved up), the pipe's
    # holders still named by their pids on the node, as /proc names them
    bundle = pipe_bundle(writer="self")
    moved = {p.pid: p.pid + PID_STRIDE for p in bundle.job.processes}
    job = dataclasses.replace(bundle.job, processes=tuple(dataclasses.replace(
        p, pid=moved[p.pid], ppid=moved.get(p.ppid, p.ppid), rank_pid=moved.get(p.rank_pid, p.rank_pid))
        for p in bundle.job.processes))
    samples = tuple(dataclasses.replace(s, processes=tuple(dataclasses.replace(p, pid=moved[p.pid]) for p in s.processes))
                    for s in bundle.samples)
    # WHEN judged round by round
    at, diagnosis = first_hang(dataclasses.replace(bundle, job=job, samples=samples))
    # THEN the holder is the reader itself, said in the node's pids
    assert at is not None and diagnosis.proof.kind == ProofKind.PIPE_NO_WRITER and diagnosis.proof.pid == PIPE_WORKER


# --- pipe-no-writer: must not fire ---------------------------------------------------------------


@pytest.mark.parametrize("writer, why", [
    ("decoder", "its decoder child holds the write end, alive: it may write again"),
    ("outside", "a process outside the job holds the write end: nothing says it will not write"),
    ("timer", "a threading.Timer of the worker itself may write"),
    ("fifo", "a FIFO with its path: any process may open it for writing"),
    ("fed", "the read got its data within the span"),
])
def test_a_pipe_that_may_still_be_written_proves_nothing(writer, why):
    # GIVEN the worker asleep reading the pipe, but `why`
    bundle = pipe_bundle(writer=writer)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN no proof names a hang: only the threshold may
    assert at is None, (why, diagnosis.proof)


def test_a_child_beside_another_live_child_of_its_waiting_parent_proves_nothing():
    # GIVEN rank 1 waiting for a child (Popen.wait) that reads rank 1's pipe, and a second live child of rank 1:
    # rank 1's wait names no pid the bundle shows, and either child's exit may end it
    bundle = pipe_bundle(reader="child", writer="sibling")
    bundle = edit(bundle, PIPE_RANK1, lambda s, i: dataclasses.replace(s, stack=None))
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN no proof
    assert at is None, diagnosis.proof


def test_a_writer_that_still_works_proves_nothing():
    # GIVEN the child reading rank 1's pipe, but rank 1 running (its CPU moves) instead of waiting for it
    bundle = pipe_bundle(reader="child")
    busy = edit(bundle, PIPE_RANK1, lambda s, i: with_proc(s, wchan=None, state="R", utime_s=20.0 + 0.5 * i))
    # WHEN judged round by round
    at, diagnosis = first_hang(busy)
    # THEN no proof: it may yet write, or close its end
    assert at is None or diagnosis.proof is None or diagnosis.proof.kind != ProofKind.PIPE_NO_WRITER


def test_a_pipe_whose_holders_were_not_read_proves_nothing():
    # GIVEN the worker asleep on the pipe, but the node's descriptors unread (writers None)
    bundle = pipe_bundle(writer="self")
    unread = edit(bundle, PIPE_WORKER, lambda s, i: with_proc(
        s, pipe_read=dataclasses.replace(s.proc.pipe_read, writers=None)) if s.proc.pipe_read else s)
    # WHEN judged round by round
    at, diagnosis = first_hang(unread)
    # THEN no proof: nothing says who holds the write end
    assert at is None, diagnosis.proof


# --- peer-gone: must fire --------------------------------------------------------------------------


def test_a_rank_in_a_collective_whose_peer_exited_cleanly_is_named_at_the_second_agreeing_sample():
    # GIVEN rank 0 in all_reduce, its CPU flat, after rank 1 exited with code 0 (its end of their
    # connection closed)
    bundle = peer_bundle("exited")
    # WHEN the watch judges each round
    at, diagnosis = first_hang(bundle)
    # THEN a proven hang at the second agreeing sample, rank 1 (the one that left) the culprit
    assert at is not None and diagnosis.proof is not None and diagnosis.proof.kind == ProofKind.PEER_GONE
    times = [s.time for s in bundle.samples]
    assert times[at] - diagnosis.proof.since >= PROOF_SPAN_S > times[at - 1] - diagnosis.proof.since
    assert diagnosis.culprits == (1,)
    # and the report says who waits where, and who left how
    report = reported(bundle, at)
    line = proof_line(report)
    assert (f"rank 0 (pid {PEER_RANK0}) waits in all_reduce at train_step (train.py:121) at every sample for 2.0 s (0.00 s CPU), "
            f"and its peer rank 1 (pid {PEER_RANK1}) exited with code 0 0.5 s before the first") in line
    assert "the collective waits for a rank that is gone, and can never complete" in line
    # and collective-straggler says rank 1 left, with a fix for leaving, not for balancing its work
    left = next(f for f in report.findings if f.rule == "collective-straggler")
    assert left.title == "Rank 1 left: the others wait in all_reduce for a rank that exited"
    assert "Make every rank run the same collectives to the end" in left.fix


def test_a_connection_from_a_peer_on_another_node_in_close_wait_is_a_proven_hang():
    # GIVEN rank 0 in all_reduce, its CPU flat, and the connection a peer on another node made to its
    # listening port in CLOSE_WAIT at every sample (the peer's process closed it)
    bundle = peer_bundle("closed")
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN proven, the peer named by its address: no rank of this capture is the culprit
    assert at is not None and diagnosis.proof.kind == ProofKind.PEER_GONE
    assert diagnosis.culprits == ()
    assert (f"its connection with the peer at {REMOTE_PEER} (accepted on its listening port 41000; no rank of "
            "this capture) is in CLOSE_WAIT at each") in diagnosis.proof.said


# --- peer-gone: must not fire ----------------------------------------------------------------------


def test_a_peer_that_failed_is_a_crash_not_a_proof():
    # GIVEN rank 1 exited with code 1 while rank 0 waits in all_reduce
    bundle = peer_bundle("failed")
    # WHEN judged
    diagnosis = judge(bundle, hang_after=LEARNED, lanes=False).diagnosis
    # THEN its exit tells a crash, rank 1 the culprit, as before
    assert diagnosis.verdict == Verdict.CRASH and diagnosis.culprits == (1,) and diagnosis.proof is None


@pytest.mark.parametrize("shape, why", [
    ("exited-late", "rank 0 computes on (its own checkpoint) after rank 1 left: it waits on nobody"),
    ("closed-web", "the connection in CLOSE_WAIT is rank 0's own to a web service, no peer's"),
    ("closed-stepping", "both ranks keep stepping with the listener's connection in CLOSE_WAIT"),
])
def test_a_peer_gone_look_alike_proves_nothing(shape, why):
    # GIVEN `why`
    bundle = peer_bundle(shape)
    # WHEN judged round by round, and at the end
    at, diagnosis = first_hang(bundle)
    final = judge(bundle, hang_after=LEARNED, lanes=False).diagnosis
    # THEN no round names a hang, and nothing is proven
    assert at is None, (why, diagnosis.proof)
    assert final.verdict == Verdict.HEALTHY and final.proof is None


def test_a_peer_that_exited_while_the_rank_still_computed_counts_from_the_ranks_wait():
    # GIVEN rank 1 gone before the third sample, rank 0 computing at the third and in all_reduce from the fourth
    bundle = peer_bundle("exited")
    computing = peer_bundle("exited-late").samples[2].sample_of(PEER_RANK0)
    late = edit(bundle, PEER_RANK0, lambda s, i: computing, first=2, last=2)
    # WHEN judged round by round
    at, diagnosis = first_hang(late)
    # THEN the proof begins at its first sample in the collective, not when the peer left
    assert at is not None and diagnosis.proof.since == late.samples[3].time


# --- real processes ----------------------------------------------------------------------------------

READ_OWN_PIPE = "import os\nr, w = os.pipe()\nopen(os.sys.argv[1], 'w').close()\nos.read(r, 1)\n"
POPEN_CAT = ("import subprocess, sys\n"
             "p = subprocess.Popen(['cat'], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)\n"
             "open(sys.argv[1], 'w').write(str(p.pid))\n"
             "p.wait()\n")
SOMEONE_WRITES = ("import os, sys, time\nr, w = os.pipe()\n"
                  "if os.fork() == 0:\n    os.close(r)\n    time.sleep(60)\n    os._exit(0)\n"
                  "os.close(w)\nopen(sys.argv[1], 'w').close()\nos.read(r, 1)\n")


def _job(procfs: ProcFS, rank: int, child: int | None = None) -> Job:
    """`rank` as discovery finds a rank (with its start time), and `child` as a child of it."""
    infos = [ProcessInfo(rank, procfs.stat(rank).ppid, Role.RANK, ("python", "-c", "..."), sys.executable,
                         procfs.stat(rank).start_time, {}, 0, 0, 0, 1, rank)]
    if child is not None:
        infos.append(ProcessInfo(child, rank, Role.CHILD, ("cat",), "/usr/bin/cat", procfs.stat(child).start_time,
                                 rank_pid=rank))
    return Job(None, None, None, 1, None, tuple(infos))


def _watched(jobs: list[Job], edit_sample=None) -> list[Bundle]:
    """Each job captured twice, PROOF_SPAN_S apart, as a watch's rounds read it (no stacks: py-spy
    not asked)."""
    first = [capture(job, Probes(pyspy=None))[0] for job in jobs]
    time.sleep(PROOF_SPAN_S + 0.1)
    second = [capture(job, Probes(pyspy=None))[0] for job in jobs]
    bundles = []
    for job, snaps in zip(jobs, zip(first, second)):
        if edit_sample is not None:
            snaps = tuple(dataclasses.replace(s, processes=tuple(edit_sample(p) for p in s.processes)) for s in snaps)
        bundles.append(Bundle(BUNDLE_SCHEMA, "0.1.0", snaps[-1].time, Host("node0", "x86_64", "6.1", 2, "3.11", "2.3.0"),
                              job, tuple(snaps), options=Options(interval_s=PROOF_SPAN_S)))
    return bundles


def _stop(started: list[subprocess.Popen]) -> None:
    for proc in started:
        try:
            os.killpg(proc.pid, 9)      # the process and whatever it forked
        except ProcessLookupError:
            pass
        proc.wait(5)


def _start(code: str, ready) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, str(ready)], start_new_session=True)


@pytest.mark.timeout(60)
def test_real_readers_of_pipes_no_process_can_write_are_proven(tmp_path):
    # GIVEN a process reading a pipe it holds the write end of, and one waiting (Popen.wait) for `cat`
    # reading its stdin, whose write end the waiting parent holds; beside them, a reader whose write
    # end a live child holds
    started: list[subprocess.Popen] = []
    try:
        for name, code in (("own", READ_OWN_PIPE), ("popen", POPEN_CAT), ("alive", SOMEONE_WRITES)):
            started.append(_start(code, tmp_path / name))
        procfs = ProcFS()
        assert wait_until(lambda: all((tmp_path / n).exists() for n in ("own", "alive"))
                          and (tmp_path / "popen").exists() and (tmp_path / "popen").read_text(), timeout=20)
        cat = int((tmp_path / "popen").read_text())
        assert wait_until(lambda: all(procfs.proc_stat(pid).in_pipe_read for pid in (started[0].pid, started[2].pid, cat)),
                          timeout=10), f"this kernel names the pipe read otherwise: {procfs.proc_stat(started[0].pid).wchan}"
        cases = ((started[0], None), (started[1], cat), (started[2], None))
        # WHEN hangdoc's collect reads each twice, PROOF_SPAN_S apart, and judges what it read
        bundles = _watched([_job(procfs, reader.pid, child) for reader, child in cases])
        for (reader, child), bundle in zip(cases, bundles):
            diagnosis = judge(bundle, hang_after=LEARNED, lanes=False).diagnosis
            # THEN the first two are proven hangs, each naming the pipe and its holder; the third is not
            if reader is started[2]:
                assert diagnosis.proof is None and diagnosis.verdict != Verdict.HANG
                continue
            assert diagnosis.verdict == Verdict.HANG and diagnosis.proof.kind == ProofKind.PIPE_NO_WRITER
            said = diagnosis.proof.said
            if child is None:
                assert f"rank 0 (pid {reader.pid}) reads pipe:[" in said
                assert "no process but itself holds its write end" in said
            else:
                assert f"child process (pid {child}) reads pipe:[" in said and "(its fd 0)" in said
                assert f"held only by rank 0 (pid {reader.pid}), fd " in said and "waiting for it to exit" in said
    finally:
        _stop(started)


PEER = ("import socket, sys\n"
        "s = socket.create_connection(('127.0.0.1', int(sys.argv[2])))\n"
        "s.close()\n")
LISTENS = ("import socket, sys, time\n"
           "srv = socket.socket()\nsrv.bind(('127.0.0.1', 0))\nsrv.listen()\n"
           "open(sys.argv[1], 'w').write(str(srv.getsockname()[1]))\n"
           "conn, _ = srv.accept()\n"
           "time.sleep(60)\n")


@pytest.mark.timeout(60)
def test_a_real_peer_that_closed_its_connection_is_proven_gone(tmp_path):
    # GIVEN a "rank" that accepted a peer's connection on its listening port and never reads it, and
    # the peer, which closed its end and exited
    started: list[subprocess.Popen] = []
    try:
        started.append(_start(LISTENS, tmp_path / "port"))
        assert wait_until(lambda: (tmp_path / "port").exists() and (tmp_path / "port").read_text(), timeout=20)
        port = (tmp_path / "port").read_text()
        peer = subprocess.run([sys.executable, "-c", PEER, "-", port], timeout=20)
        assert peer.returncode == 0
        job = _job(ProcFS(), started[0].pid)
        # its stack as py-spy reads a rank waiting in all_reduce (no py-spy asked here)
        waiting = Stack((Thread(started[0].pid, "MainThread", False, False, ALL_REDUCE),))

        def in_all_reduce(sample):
            return dataclasses.replace(sample, stack=waiting) if sample.pid == started[0].pid else sample

        # WHEN hangdoc's collect reads its sockets twice, PROOF_SPAN_S apart, and judges what it read
        bundle, = _watched([job], in_all_reduce)
        diagnosis = judge(bundle, hang_after=LEARNED, lanes=False).diagnosis
        # THEN the connection reads CLOSE_WAIT, and the hang is proven: the peer is gone
        assert any(s.state == "CLOSE_WAIT" for s in bundle.last.sample_of(started[0].pid).proc.sockets)
        assert diagnosis.verdict == Verdict.HANG and diagnosis.proof.kind == ProofKind.PEER_GONE
        assert f"(accepted on its listening port {port}; no rank of this capture) is in CLOSE_WAIT" in diagnosis.proof.said
    finally:
        _stop(started)


# --- saved --------------------------------------------------------------------------------------------


def test_a_saved_bundle_keeps_the_pipe_its_writers_and_the_proofs_culprits(tmp_path):
    # GIVEN the pipe's and the departed peer's bundles, cut at the round their proofs name the hang
    for bundle in (pipe_bundle(writer="self"), peer_bundle("exited")):
        at, diagnosis = first_hang(bundle)
        cut = dataclasses.replace(bundle, samples=bundle.samples[:at + 1])
        # WHEN saved as a watch saves it (v2, with its node's digest) and read back
        path = save_node(cut, tmp_path / f"{at}-{diagnosis.proof.kind}.json.zst")
        again = load_bundle(path)
        digest = load_head(path).digest
        # THEN the bundle is the same (the pipe read and its writers included), and so is its verdict
        assert again == cut
        assert judge(again, hang_after=LEARNED, lanes=False).diagnosis.proof == diagnosis.proof
        # and the digest a merge of nodes reads carries the proof with the ranks it names
        held = [r.proof for r in digest.ranks if r.proof is not None]
        assert held and held[0].kind == diagnosis.proof.kind
        assert held[0].culprits == ((1,) if held[0].kind == ProofKind.PEER_GONE else None)


def test_a_pdb_prompt_reading_a_pipe_only_it_holds_is_named_a_pdb_prompt():
    # GIVEN pdb-breakpoint's rank 0 at its prompt, its stdin a pipe whose write end only it holds
    bundle = golden("pdb-breakpoint")
    pid = rank_pid(bundle, 0)
    node_pid = bundle.job.info(pid).node_pid
    stdin = PipeRead(0, "pipe:[4242]", (PipeEnd(node_pid, 7),))
    bundle = edit(bundle, pid, lambda s, i: with_proc(s, wchan="anon_pipe_read", syscall="0", pipe_read=stdin)
                  if s.proc is not None else s)
    # WHEN judged round by round
    at, diagnosis = first_hang(bundle)
    # THEN the prompt is the proof: what ends the wait is someone answering it
    assert at is not None and diagnosis.proof.kind == ProofKind.PDB_PROMPT
