"""NCCL RAS: hangdoc speaks the RAS client protocol to a small local server serving a stored answer.

The answers in tests/flight_recorder/ras/ are hand-made from the NCCL sources' output code (no
NCCL job was available; see the README there): JSON of NCCL >= 2.28, the text report of 2.24.
"""
from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from hangdoc.collect.ras import query_ras
from hangdoc.model import Job, ProcessInfo, Role
from hangdoc.rules.flight_recorder import ras_lines

RAS = Path(__file__).resolve().parents[1] / "flight_recorder" / "ras"


class RasServer:
    """One connection at a time, as NCCL's RAS thread answers a client: handshake, TIMEOUT, SET FORMAT
    (json only when `json_ok`), then (VERBOSE) STATUS -> the stored answer and close."""

    def __init__(self, answer: str, json_ok: bool, stall: bool = False):
        self.answer, self.json_ok, self.stall = answer, json_ok, stall
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.commands: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn, conn.makefile("rwb") as f:
            for raw in f:
                cmd = raw.decode().strip()
                self.commands.append(cmd)
                if self.stall:
                    time.sleep(3)
                    return
                if cmd.upper().startswith("CLIENT PROTOCOL"):
                    f.write(b"SERVER PROTOCOL 2\n")
                elif cmd.upper().startswith("TIMEOUT"):
                    f.write(b"OK\n")
                elif cmd.upper() == "SET FORMAT JSON":
                    f.write(b"OK\n" if self.json_ok else b"ERROR: Unknown command set format json\n")
                elif cmd.upper() in ("STATUS", "VERBOSE STATUS"):
                    f.write(self.answer.encode())
                    f.flush()
                    return
                f.flush()

    def close(self) -> None:
        self.sock.close()


def job_at(port: int) -> Job:
    rank = ProcessInfo(pid=10, ppid=1, role=Role.RANK, cmdline=(), exe=None, start_time=0.0,
                       env={"NCCL_RAS_ADDR": f"127.0.0.1:{port}"}, rank=0, world_size=8)
    return Job(None, None, None, 8, None, (rank,))


def test_json_answer_gives_counts_and_missing_ranks():
    # GIVEN a RAS service of NCCL 2.28 (JSON) where rank 7 is missing and rank 6 is one collective behind
    server = RasServer((RAS / "status-2.28.json").read_text(), json_ok=True)
    try:
        # WHEN hangdoc queries it at the job's NCCL_RAS_ADDR
        status = query_ras(job_at(server.port), timeout_s=3)
    finally:
        server.close()
    # THEN it spoke the protocol and the job-wide picture is in the status
    assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "SET FORMAT json", "VERBOSE STATUS"]
    assert (status.status, status.form, status.nccl_version) == ("ok", "json", "2.28.7")
    [comm] = status.communicators
    assert (comm.size, comm.missing_ranks, comm.unresponsive_ranks) == (8, (7,), (7,))
    assert comm.collective_counts["6"] == 4812 and comm.collective_counts["0"] == 4813
    assert ras_lines(status) == ["NCCL RAS: communicator 0x6f1e2d3c4b5a6978 (8 ranks): missing ranks 7; "
                                 "collective counts 4812..4813, lowest on rank(s) 6"]


def test_text_answer_of_an_older_nccl_is_read_too():
    # GIVEN NCCL 2.24, which answers ERROR to SET FORMAT and reports in text
    server = RasServer((RAS / "status-2.24.txt").read_text(), json_ok=False)
    try:
        status = query_ras(job_at(server.port), timeout_s=3)
    finally:
        server.close()
    # THEN the missing rank, the dead process and the lagging rank's count come out of the text
    assert (status.status, status.form, status.nccl_version, status.dead_processes) == ("ok", "text", "2.24.3", 1)
    [comm] = status.communicators
    assert comm.missing_ranks == (7,) and comm.collective_counts == {"6": 4811}
    assert any("The missing rank: 7" in line for line in status.lines)


def test_no_service_and_no_client_is_unavailable_quickly():
    # GIVEN nothing listening and no ncclras on PATH
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    started = time.monotonic()
    status = query_ras(job_at(port), timeout_s=2, which=lambda name: None)
    # THEN it says why, at once, without raising
    assert status.status == "unavailable" and "ncclras is not on PATH" in status.reason
    assert time.monotonic() - started < 1.5


def test_a_silent_service_is_bounded_by_the_timeout():
    server = RasServer("", json_ok=True, stall=True)
    started = time.monotonic()
    try:
        status = query_ras(job_at(server.port), timeout_s=1, which=lambda name: None)
    finally:
        server.close()
    assert status.status == "unavailable" and time.monotonic() - started < 2.5


@pytest.mark.parametrize("answer", ["json", "text"])
def test_ncclras_on_path_is_used_when_the_port_is_closed(answer, tmp_path):
    # GIVEN a closed port but an ncclras client (here: a stub printing a stored answer)
    stored = RAS / ("status-2.28.json" if answer == "json" else "status-2.24.txt")

    def run(cmd, **kwargs):
        import subprocess

        if answer == "text" and "-f" in cmd:
            return subprocess.CompletedProcess(cmd, 1, "", "ncclras: invalid option -- 'f'\n")
        return subprocess.CompletedProcess(cmd, 0, stored.read_text(), "")

    status = query_ras(job_at(1), timeout_s=1, which=lambda name: "/usr/bin/ncclras", run=run)
    assert (status.source, status.status, status.form) == ("ncclras", "ok", answer)
    assert status.communicators[0].missing_ranks == (7,)


def test_the_watcher_s_collector_asks_ras_once_a_rank_is_stuck_and_the_rule_cites_it():
    import dataclasses

    from hangdoc.report import judge
    from hangdoc.bundle.files import load_bundle
    from hangdoc.live.flight import FlightCollector

    # GIVEN an NCCL job (its ranks name NCCL_RAS_ADDR) whose RAS service reports rank 7 missing
    server = RasServer((RAS / "status-2.28.json").read_text(), json_ok=True)
    collector = FlightCollector(wait_s=0.5)
    try:
        # WHEN nothing is stuck THEN RAS is not asked; WHEN a rank is stuck THEN it is, once
        collector.gather(job_at(server.port), stuck=False)
        assert collector.ras is None
        collector.gather(job_at(server.port), stuck=True)
    finally:
        server.close()
    assert collector.ras.status == "ok" and collector.ras.communicators[0].missing_ranks == (7,)
    # AND the flight-recorder finding carries RAS's view beside the dumps
    bundle = load_bundle(Path(__file__).resolve().parents[1] / "golden" / "fr-straggler" / "bundle.json")
    report = judge(dataclasses.replace(bundle, ras=collector.ras)).report
    fr = next(f for f in report.findings if f.rule == "flight-recorder")
    assert any(line.startswith("NCCL RAS: communicator 0x6f1e2d3c4b5a6978 (8 ranks): missing ranks 7")
               for line in fr.evidence)
