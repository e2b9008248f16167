"""NCCL's RAS service (NCCL >= 2.24, on by default): job-wide collective counts, missing and dead ranks.

Every NCCL process listens on `NCCL_RAS_ADDR` (default localhost:28028). hangdoc speaks the RAS
client protocol itself (`CLIENT PROTOCOL 2`, `TIMEOUT`, `SET FORMAT json` where NCCL >= 2.28 has
it, `VERBOSE STATUS`), and runs `ncclras` when the port does not answer but the client is on PATH.
Bounded in time, and never fatal: no answer is a RasStatus with status "unavailable" and why.
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from typing import Callable

from hangdoc.model import Job, RasComm, RasStatus

RAS_PORT = 28028
PROTOCOL = 2
MAX_ANSWER = 4 << 20
KEEP_LINES = 200


def ras_address(job: Job | None) -> tuple[str, int]:
    """(host, port) from a rank's NCCL_RAS_ADDR, else localhost:28028."""
    for proc in job.ranks if job is not None else ():
        value = proc.env.get("NCCL_RAS_ADDR")
        if value and ":" in value:
            host, _, port = value.rpartition(":")
            if port.isdigit():
                return (host.strip("[]") or "localhost"), int(port)
    return "localhost", RAS_PORT


def query_ras(job: Job | None = None, *, timeout_s: float = 5.0,
              connect: Callable[..., socket.socket] = socket.create_connection,
              which: Callable[[str], str | None] = shutil.which,
              run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> RasStatus:
    """Ask the RAS service for the job's state; never raises."""
    host, port = ras_address(job)
    source = f"{host}:{port}"
    try:
        form, text = _ask(host, port, timeout_s, connect)
        return parse_answer(text, source, form)
    except (OSError, ValueError) as exc:
        why = f"{source}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
    client = which("ncclras")
    if client is None:
        return RasStatus(source=source, status="unavailable", reason=f"{why}; ncclras is not on PATH")
    for form, args in (("json", ["-f", "json"]), ("text", [])):
        try:
            done = run([client, "-h", host, "-p", str(port), "-t", "2", *args], capture_output=True,
                       text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return RasStatus(source="ncclras", status="unavailable", reason=f"ncclras: {exc}")
        if done.returncode == 0 and done.stdout.strip():
            return parse_answer(done.stdout, "ncclras", form)
    tail = (done.stderr or "").strip().splitlines()
    return RasStatus(source="ncclras", status="unavailable",
                     reason=f"ncclras exited {done.returncode}: {tail[-1] if tail else 'no output'}")


def _ask(host: str, port: int, timeout_s: float, connect) -> tuple[str, str]:
    deadline = time.monotonic() + timeout_s

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ValueError(f"no complete answer within {timeout_s:g} s")
        return remaining

    with connect((host, port), timeout=min(1.0, timeout_s)) as sock:
        buffer = b""

        def line() -> str:
            nonlocal buffer
            while b"\n" not in buffer:
                sock.settimeout(left())
                chunk = sock.recv(4096)
                if not chunk:
                    raise ValueError("the RAS service closed the connection")
                buffer += chunk
            first, _, buffer = buffer.partition(b"\n")
            return first.decode(errors="replace").strip()

        def say(text: str) -> None:
            sock.settimeout(left())
            sock.sendall(text.encode() + b"\n")

        say(f"CLIENT PROTOCOL {PROTOCOL}")
        hello = line()
        if not hello.upper().startswith("SERVER PROTOCOL"):
            raise ValueError(f"not a NCCL RAS service (it said {hello[:60]!r})")
        say(f"TIMEOUT {max(1, int(timeout_s / 2))}")
        line()
        say("SET FORMAT json")
        form = "json" if line().upper() == "OK" else "text"   # before NCCL 2.28: "ERROR: Unknown command"
        say("VERBOSE STATUS")
        while len(buffer) < MAX_ANSWER:
            sock.settimeout(left())
            chunk = sock.recv(65536)
            if not chunk:
                break
            buffer += chunk
    return form, buffer.decode(errors="replace")


def parse_answer(text: str, source: str, form: str) -> RasStatus:
    """The RAS answer (JSON of NCCL >= 2.28, or the text report) as a RasStatus."""
    lines = tuple(text.splitlines()[:KEEP_LINES])
    if form == "json":
        try:
            return _from_json(json.loads(text), source, lines)
        except (ValueError, TypeError, AttributeError, KeyError):
            pass        # an older client ignores -f json: read it as text
    return _from_text(text, source, lines)


def _from_json(data: dict, source: str, lines: tuple[str, ...]) -> RasStatus:
    comms = []
    for comm in data.get("communicators") or ():
        counts = {str(r["rank"]): sum(int(v) for v in (r.get("collective_counts") or {}).values())
                  for r in comm.get("ranks") or ()}
        missing = comm.get("missing_ranks") or ()
        comms.append(RasComm(
            hash=str(comm.get("hash", "?")), size=int(comm.get("size", 0)),
            ranks_reporting=int(comm.get("ranks_count", len(counts))),
            missing_ranks=tuple(int(m["rank"]) for m in missing),
            dead_ranks=tuple(int(m["rank"]) for m in missing if (m.get("status") or {}).get("considered_dead")),
            unresponsive_ranks=tuple(int(m["rank"]) for m in missing if (m.get("status") or {}).get("unresponsive")),
            collective_counts=counts,
        ))
    dead = {r for c in comms for r in c.dead_ranks}
    return RasStatus(source=source, status="ok", form="json", nccl_version=data.get("nccl_version"),
                     communicators=tuple(comms), dead_processes=len(dead), lines=lines)


_COMM = re.compile(r"^#\d+-\d+ \(([0-9a-fA-Fx]+)\) ([A-Z]+)")
_MISSING = re.compile(r"The missing ranks?: ([\d,\s-]+)")
_LAUNCHED = re.compile(r"Rank (\d+) has launched up to operation (\d+)")
_DEAD = re.compile(r"(\d+) job process(?:es)? (?:is|are) considered dead")
_VERSION = re.compile(r"NCCL version (\S+)")


def _from_text(text: str, source: str, lines: tuple[str, ...]) -> RasStatus:
    comms: dict[str, dict] = {}
    current = None
    version = dead = None
    for line in text.splitlines():
        if version is None and (m := _VERSION.search(line)):
            version = m.group(1)
        if m := _DEAD.search(line):
            dead = int(m.group(1))
        if m := _COMM.match(line.strip()):
            current = comms.setdefault(m.group(1), {"missing": [], "counts": {}})
        elif current is not None and (m := _MISSING.search(line)):
            current["missing"] += [int(r) for r in re.findall(r"\d+", m.group(1))]
        elif current is not None and (m := _LAUNCHED.search(line)):
            current["counts"][m.group(1)] = int(m.group(2))
    return RasStatus(
        source=source, status="ok", form="text", nccl_version=version,
        communicators=tuple(RasComm(hash=h, size=0, ranks_reporting=0, missing_ranks=tuple(c["missing"]),
                                    collective_counts=c["counts"]) for h, c in comms.items()),
        dead_processes=dead or 0, lines=lines)


def uses_nccl(job: Job) -> bool:
    """Whether asking RAS makes sense: a rank maps libnccl or names NCCL_RAS_ADDR."""
    return any("libnccl" in lib for p in job.ranks for lib in p.libs) or any("NCCL_RAS_ADDR" in p.env for p in job.ranks)
