"""The order of departure: the rank that left first is the culprit of the failures it caused; a
peer's address in their errors is matched to its socket. Bundles built in code; no process runs."""
from __future__ import annotations

import dataclasses
import io
import os

import msgspec

from test_rank_exits import died, job_bundle, rank_pid
from hangdoc.analyze.diagnose import node_digest
from hangdoc.analyze.rendezvous import not_joined
from hangdoc.collect.sockets import tcp_sockets
from hangdoc.live.runner import OutputTail
from hangdoc.model import TcpSocket
from hangdoc.render.words import headline
from hangdoc.report import judge

# gloo prints a port in network byte order: rank 1's 44063 reads 8108
CLOSED = ("[rank0]: Traceback (most recent call last):",
          '[rank0]:   File "/work/train.py", line 9, in <module>',
          "[rank0]:     dist.barrier()",
          "[rank0]: RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:8108. "
          "This is typically caused by a remote worker crashing.")


def with_sockets(bundle, rank: int, *sockets: TcpSocket):
    """The bundle with `sockets` read on `rank` at every sample it was alive."""
    samples = []
    for snap in bundle.samples:
        rows = tuple(dataclasses.replace(s, proc=dataclasses.replace(s.proc, sockets=sockets))
                     if s.pid == rank_pid(rank) and s.proc is not None else s for s in snap.processes)
        samples.append(dataclasses.replace(snap, processes=rows))
    return dataclasses.replace(bundle, samples=tuple(samples))


def test_a_rank_that_exited_0_before_its_peer_failed_is_the_culprit():
    # GIVEN rank 1 exited 0 at +1.8 s while rank 0 was in a collective; rank 0 then failed (exit 1)
    # with "Connection closed by peer" naming rank 1's own end of their connection
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=(died(1, 1.8, code=0), died(0, 2.0, code=1)), logs=CLOSED)
    bundle = with_sockets(bundle, 1, TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"))
    # WHEN diagnosed
    report = judge(bundle).report
    # THEN rank 1, the first to leave, is the culprit, and rank 0 a consequence
    assert (report.verdict, report.culprit_ranks) == ("crash", (1,))
    assert report.cause[0].startswith("rank 1 left first: it exited with code 0"), report.cause
    assert "rank 0 then failed because it left" in report.cause[0], report.cause
    [died_] = [f for f in report.findings if f.rule == "rank-died"]
    assert "left first: it exited with code 0" in died_.title, died_.title
    assert any("Connection closed by peer [127.0.0.1]:8108, rank 1's own end" in e for e in died_.evidence)


def test_a_rank_still_running_whose_address_the_failure_names_is_the_culprit():
    # GIVEN rank 1 alive (tearing its group down) when rank 0 failed naming rank 1's address
    bundle = job_bundle({0: 4, 1: 5}, 5, exits=(died(0, 1.8, code=1),), logs=CLOSED)
    bundle = with_sockets(bundle, 1, TcpSocket("127.0.0.1:44063", "127.0.0.1:36644", "ESTABLISHED"))
    # THEN rank 1 is the culprit: it closed its connections while still running
    report = judge(bundle).report
    assert (report.verdict, report.culprit_ranks) == ("crash", (1,))
    assert report.cause[0].startswith("rank 1 left first: it closed its connections (its process still running)")


def test_a_rank_that_closed_its_connections_and_then_failed_is_told_to_read_its_output_not_its_collectives():
    # GIVEN rank 1 alive when rank 0 failed naming its address, then rank 1 exiting with code 1,
    # nothing of its own printed (its words lost, or never written)
    bundle = job_bundle({0: 4, 1: 5}, 5, exits=(died(0, 1.8, code=1), died(1, 2.6, code=1)), logs=CLOSED)
    bundle = with_sockets(bundle, 1, TcpSocket("127.0.0.1:44063", "127.0.0.1:36644", "ESTABLISHED"))
    # WHEN diagnosed
    [died_] = [f for f in judge(bundle).report.findings if f.rule == "rank-died"]
    # THEN it left first, and the fix says it failed and where its words are, not that it skipped a collective
    assert "left first: it closed its connections" in died_.title, died_.title
    assert "closed its connections and then exited with code 1: it failed" in died_.fix, died_.fix
    assert "[rank1]:" in died_.fix and "fewer collectives" not in died_.fix
    # AND a rank that left with code 0 is still told it ran fewer collectives
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=(died(1, 1.8, code=0), died(0, 2.0, code=1)), logs=CLOSED)
    bundle = with_sockets(bundle, 1, TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"))
    [died_] = [f for f in judge(bundle).report.findings if f.rule == "rank-died"]
    assert "ran fewer collectives than the others" in died_.fix


def test_a_rank_killed_by_a_signal_is_an_ordinary_crash_not_a_departure():
    # GIVEN rank 1 SIGKILLed, then rank 0 failing on the closed connection
    bundle = job_bundle({0: 5, 1: 4}, 5, exits=(died(1, 1.8, signal=9), died(0, 2.0, code=1)), logs=CLOSED)
    bundle = with_sockets(bundle, 1, TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"))
    # THEN rank 1 is the culprit as before, told by its signal
    report = judge(bundle).report
    assert report.culprit_ranks == (1,)
    [died_] = [f for f in report.findings if f.rule == "rank-died"]
    assert "SIGKILL" in died_.title and "left first" not in died_.title


def test_the_sockets_are_read_from_the_descriptors_and_the_kernels_table(tmp_path):
    # GIVEN a /proc tree where pid 7 holds socket inode 555 (listening on 127.0.0.1:44063) and a pipe
    fd = tmp_path / "7" / "fd"
    fd.mkdir(parents=True)
    os.symlink("socket:[555]", fd / "3")
    os.symlink("pipe:[9]", fd / "4")
    (tmp_path / "7" / "net").mkdir()
    (tmp_path / "7" / "net" / "tcp").write_text(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:AC1F 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1\n"
        "   1: 0100007F:1F90 0100007F:AC1F 01 00000000:00000000 00:00000000 00000000     0        0 556 1\n")
    # WHEN read
    # THEN its one socket, with the address as gloo's peer would name it
    assert tcp_sockets(7, str(tmp_path)) == (TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"),)


def test_a_rank_in_setup_that_never_reached_the_others_store_is_who_they_wait_for():
    # GIVEN two ranks in init_process_group, rank 0 connected to the store, rank 1 not
    digest = node_digest(job_bundle({0: 3, 1: 3}, 3))
    r0, r1 = digest.ranks
    waiting = [msgspec.structs.replace(r0, joining="init_process_group", store="localhost:29500", store_reached=True),
               msgspec.structs.replace(r1, joining="init_process_group", store="localhost:29500",
                                       store_reached=False)]
    # THEN rank 1 is the rank they wait for; with both connected, none is
    assert not_joined(waiting) == (1,)
    assert not_joined([waiting[0], msgspec.structs.replace(waiting[1], store_reached=True)]) == ()


def test_a_job_that_failed_on_its_own_is_not_said_to_be_ended_by_hangdoc():
    # GIVEN the output of a job that crashed, which hangdoc stops the rest of
    tail = OutputTail(io.BytesIO(b"Traceback (most recent call last):\nValueError: bad\n"), io.StringIO())
    tail.join()
    sink = io.StringIO()
    tail._sink = sink
    # WHEN it says how the job ended
    tail.say_ended(failed=True)
    # THEN it says the job failed on its own
    assert sink.getvalue() == "hangdoc: the job had failed on its own; hangdoc stopped what was left of it\n"


def test_a_rank_that_raised_first_is_told_by_its_own_exception_though_its_peer_exited_first():
    # GIVEN rank 1 raised (its traceback printed) and, winding down, closed its connections: rank 0
    # failed on them and exited before rank 1's own exit was read
    raised = ("[rank1]: Traceback (most recent call last):", '[rank1]:   File "/work/train.py", line 5, in <module>',
              "[rank1]: OSError: transient read error") + CLOSED
    bundle = job_bundle({0: 4, 1: 5}, 5, exits=(died(0, 1.8, code=1),), logs=raised)
    bundle = with_sockets(bundle, 1, TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"))
    # THEN rank 1 is the culprit, and the cause is its own exception
    report = judge(bundle).report
    assert report.culprit_ranks == (1,)
    assert report.cause[0] == "rank 1 raised OSError: transient read error", report.cause


def test_a_hang_with_every_rank_in_setup_and_no_culprit_says_so_not_that_the_culprit_is_elsewhere():
    # GIVEN a hang whose every rank waits in init_process_group, none named the culprit
    report = judge(job_bundle({0: 3, 1: 3}, 3)).report
    setup = "init_process_group (torch/distributed/distributed_c10d.py:1899)"
    report = dataclasses.replace(report, verdict="hang", culprit_ranks=(), findings=(),
                                 ranks=tuple(dataclasses.replace(r, top_frame=setup) for r in report.ranks))
    # WHEN its headline is written
    line = headline(report)
    # THEN it says where they all wait, not that "the culprit is not among them" alone
    assert line.startswith("HANG: every rank here waits in init_process_group and none got through"), line
    assert "not among them" not in line
