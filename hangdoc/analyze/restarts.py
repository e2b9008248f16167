"""A job its launcher restarts: torchrun's elastic agent (`--max-restarts`), read from the bundle.

When a rank fails and restarts are left, the agent stops the other ranks and starts every rank
again, with new pids and TORCHELASTIC_RESTART_COUNT one higher in their environment (a
*generation*). A generation's failure is then an event of the job, not its end: the job is
judged by its newest generation (`Job.ranks`), and the failures of the earlier ones are said
(`rules/workers_restarted.py`). Restarts used up, the job's crash is named by the last start's own
first failure, the earlier starts its history.
"""
from __future__ import annotations

import re
import signal as signals
from dataclasses import dataclass

from hangdoc.analyze.departures import printed_as
from hangdoc.analyze.logs import all_lines, rank_exception
from hangdoc.base.kept import per_last
from hangdoc.base.parse import to_int
from hangdoc.base.words import start_name
from hangdoc.model import Bundle, LogTail, ProcessInfo


@dataclass(frozen=True)
class Failure:
    """The first rank of one generation that failed: how, when, and what it printed."""

    generation: int
    rank: int | None
    pid: int                       # on its own node
    time: float | None             # when it died (None: only a later sample found it gone)
    code: int | None
    signal: int | None
    said: str | None = None        # the exception it printed, when the job's output was read
    where: str | None = None       # where it was raised, and its line ("job.py:56 in main: raise ...")

    @property
    def how(self) -> str:
        if self.signal is not None:
            return f"was killed by {_signal_name(self.signal)}"
        if self.code is not None:
            return f"exited with code {self.code}"
        return "vanished; its exit status could not be read"


@dataclass(frozen=True)
class Restarts:
    """What the launcher's restarts did: the current generation, the most allowed, each failure."""

    generation: int                # the newest generation's restart count (0: never restarted)
    max_restarts: int | None       # TORCHELASTIC_MAX_RESTARTS (None: not said)
    failures: tuple[Failure, ...]  # the first failure of each generation that failed, oldest first
    launcher_alive: bool           # the launcher was alive at the last sample
    generation_failed: bool        # a rank of the newest generation failed (the launcher stops the others)
    started: tuple[float, ...] = ()   # when each generation after the first began (its first rank's start)

    @property
    def began(self) -> float | None:
        """When the newest generation began (None: the first start, whose beginning the watch may
        not have seen): its quiet counts from there, not from the first sample."""
        return self.started[-1] if self.started and self.restarted else None

    @property
    def restarted(self) -> bool:
        return self.generation > 0

    @property
    def left(self) -> int | None:
        return None if self.max_restarts is None else max(0, self.max_restarts - self.generation)

    @property
    def pending(self) -> bool:
        """The newest generation failed and the launcher lives with restarts left: it starts the next."""
        return self.generation_failed and self.launcher_alive and bool(self.left)

    @property
    def used_up(self) -> bool:
        """The newest generation failed with no restart left: the job's crash."""
        return self.generation_failed and self.restarted and not self.left

    @property
    def first(self) -> Failure | None:
        return self.failures[0] if self.failures else None

    @property
    def last(self) -> Failure | None:
        """The newest start's first failure, where it failed: what ended a job whose restarts are used up."""
        return self.failures[-1] if self.generation_failed else None


@per_last
def restarts_of(bundle: Bundle) -> Restarts | None:
    """The job's restarts, or None for a job whose launcher may not restart it (no elastic agent
    said a maximum) and that was never restarted."""
    ranks = bundle.job.all_ranks
    if not ranks:
        return None
    current = bundle.job.ranks
    generation = max(p.generation for p in current)
    max_restarts = max((m for p in ranks if (m := to_int(p.env.get("TORCHELASTIC_MAX_RESTARTS"))) is not None),
                       default=None)
    if generation == 0 and not max_restarts:
        return None
    by_generation: dict[int, list[ProcessInfo]] = {}
    for proc in ranks:
        by_generation.setdefault(proc.generation, []).append(proc)
    failures = tuple(f for g in sorted(by_generation) if (f := _first_failure(bundle, g, by_generation)))
    launcher = bundle.job.launcher_pid
    sample = bundle.last.sample_of(launcher) if launcher is not None and bundle.samples else None
    alive = sample is not None and sample.alive
    failed = any(f.generation == generation for f in failures)
    started = tuple(min(p.start_time for p in by_generation[g]) for g in sorted(by_generation) if g > 0)
    return Restarts(generation, max_restarts, failures, alive, failed, started)


def _first_failure(bundle: Bundle, generation: int, by_generation: dict[int, list[ProcessInfo]]) -> Failure | None:
    """The generation's first rank to fail: the earliest failed exit, a fatal signal or an error
    before the launcher's SIGTERM when read at one instant. A rank whose status the watch could not
    read (its launcher reaped it first) counts with what torchrun's log says of it ("failed
    (exitcode: N)"), or as unknown beside a failure read; ranks all gone unread, none read or logged
    failing, are no failure (ranks that ran to their end, reaped by the launcher within a sample)."""
    logged = _logged_exits(bundle)
    procs = by_generation[generation]
    failed, unknown = [], []
    for proc in procs:
        record = bundle.exit_of(proc.pid)
        if record is None:
            continue
        code, sig = record.code, record.signal
        if not record.told:
            said = logged.get(proc.node_pid)
            if said is None:
                unknown.append((record.time, 3, proc, None, None))
                continue
            code, sig = (None, -said) if said < 0 else (said, None)
        if sig is not None or code != 0:
            order = 2 if sig == signals.SIGTERM else (0 if sig is not None else 1)
            failed.append((record.time, order, proc, code, sig))
    if not failed:
        return None     # ranks reaped unread, none read or logged failing: a start that ran to its end
    failed += unknown   # beside a failure, one gone unread before it may be the first

    # The launcher SIGTERMs the others once one failed: a rank killed by SIGTERM is its teardown, not
    # the first failure, where another failed otherwise soon after (its exit read a round later).
    others = [f[0] for f in failed if f[1] != 2 and f[0] is not None]

    def teardown(f) -> bool:
        return f[1] == 2 and f[0] is not None and any(0 <= t - f[0] <= TEARDOWN_S for t in others)

    when, _, proc, code, sig = min(failed, key=lambda f: (teardown(f), f[0] if f[0] is not None else float("inf"),
                                                          f[1], f[2].rank if f[2].rank is not None else -1))
    own = _output_of(bundle, generation, by_generation)
    # A rank that raised and then aborted as the interpreter wound down (gloo's threads) printed its exception too.
    raised = rank_exception(own, proc.rank) if code != 0 and sig in (None, signals.SIGABRT) else None
    said = raised.messages[-1] if raised is not None and raised.messages else None
    where = None
    if raised is not None and raised.where:
        where = raised.where + (f": {raised.code[:200]}" if raised.code else "")
    return Failure(generation, proc.rank, proc.node_pid, when, code, sig, said, where)


def newest_output(bundle: Bundle, restarts: Restarts | None) -> tuple[LogTail, ...]:
    """The job's output since its newest start began (all of it for a job never restarted): an
    earlier start's traceback is its history, not how the newest one ended."""
    if restarts is None or not restarts.restarted:
        return bundle.logs
    by_generation: dict[int, list[ProcessInfo]] = {}
    for proc in bundle.job.all_ranks:
        by_generation.setdefault(proc.generation, []).append(proc)
    if restarts.generation not in by_generation:
        return bundle.logs
    return _output_of(bundle, restarts.generation, by_generation)


TEARDOWN_S = 10.0     # a SIGTERM read this long before another rank's failure is the launcher's teardown


def _output_of(bundle: Bundle, generation: int, by_generation: dict[int, list[ProcessInfo]]) -> tuple[LogTail, ...]:
    """The job's output of one start: the lines after torchrun said the start before it failed
    ("failed (exitcode: 1) ... (pid: P)" of a pid of an earlier start), up to its saying so of this one."""
    earlier = {p.node_pid for g, procs in by_generation.items() if g < generation for p in procs}
    own = {p.node_pid for p in by_generation[generation]}
    tails = []
    for tail in bundle.logs:
        begin, end = 0, len(tail.lines)
        for i, line in enumerate(tail.lines):
            for match in _TORCHRUN_FAILED.finditer(line):
                pid = int(match.group(2))
                if pid in earlier:
                    begin = i + 1
                elif pid in own and end == len(tail.lines):
                    end = i + 1
        tails.append(LogTail(tail.source, tail.lines[begin:max(begin, end)]))
    return tuple(tails)


_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: \d+ \(pid: (\d+)\)")


def _logged_exits(bundle: Bundle) -> dict[int, int]:
    """pid -> exit code from torchrun's "failed (exitcode: N) local_rank: L (pid: P)" lines (negative: a signal)."""
    found: dict[int, int] = {}
    for _, line in all_lines(bundle.logs):
        for match in _TORCHRUN_FAILED.finditer(line):
            found[int(match.group(2))] = int(match.group(1))
    return found


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


# Process-group setup, as a failure in it reads: gloo's connect, the store's errors, or raised in
# torch's setup functions. A restarted start that fails there fails on what the launcher handed it
# (the store, the peers' addresses), not on the job's code.
_SETUP_ERRORS = ("connectFullMesh", "DistNetworkError", "DistStoreError", "client socket has timed out")
_SETUP_WHERE = (" in init_process_group", " in _new_process_group_helper", " in _create_c10d_store",
                " in _store_based_barrier", " in _rendezvous_helper", " in next_rendezvous")
# gloo's connect to its peers ("connectFullMesh failed with [.../pair.cc:152] ... remote=[host]:port"):
# the address it names is a peer's listener that the store handed out, never an address the job chose.
_PEER_CONNECT = ("connectFullMesh", "/tcp/pair.cc")
_ADDRESS = re.compile(r"\[?(\d{1,3}(?:\.\d{1,3}){3})\]?:(\d+)")
_PAIR = re.compile(r"\((\d{1,3}(?:\.\d{1,3}){3}), (\d+)\)")      # "(127.0.0.1, 9)", as the store's client says


def in_setup(failure: Failure) -> bool:
    """The failure came out of process-group setup (init_process_group, the store, gloo's connect)."""
    said, where = failure.said or "", failure.where or ""
    return any(m in said for m in _SETUP_ERRORS) or any(w in where for w in _SETUP_WHERE)


def launcher_made(bundle: Bundle, failure: Failure) -> str | None:
    """Why a restarted start's failure in setup is of the launcher's making (None: it is not, or
    this is the first start): an address of an earlier start, handed out again by a store that kept
    it, or a connect that the restart's own teardown and start-up refused."""
    if failure.generation == 0 or not in_setup(failure):
        return None
    named = _named(failure)
    for address in named:
        owner = _earlier_owner(bundle, address, failure.generation)
        if owner is not None:
            return (f"the launcher's own making: {address} was {owner}; the store still held the earlier "
                    "start's address and handed it to the restarted ranks (a stale store), not the job's code")
    if _peer_connect(failure):
        return ("the launcher's own making: the restarted ranks could not reach each other in init_process_group "
                f"(gloo's connect to {', '.join(named) or 'a peer'}, a peer's address handed out by the store, was "
                "refused, as after a restart on a loaded machine), not the job's code")
    store = _store_of(bundle, failure)
    if store is not None and any(a.rpartition(":")[2] != store.rpartition(":")[2] for a in named):
        return None     # an address of the job's own: `restart_cause` says so
    return ("the launcher's own making: the restarted ranks could not reach each other or the store in "
            "init_process_group (as after a restart on a loaded machine), not the job's code")


def _peer_connect(failure: Failure) -> bool:
    """The failure is gloo's connect to its peers: the addresses it names are theirs, not the store's."""
    return any(m in (failure.said or "") for m in _PEER_CONNECT)


def _named(failure: Failure) -> list[str]:
    """The "host:port" addresses the failure's error names."""
    said = failure.said or ""
    return sorted({f"{host}:{port}" for host, port in _ADDRESS.findall(said) + _PAIR.findall(said)})


def _store_of(bundle: Bundle, failure: Failure) -> str | None:
    proc = next((p for p in bundle.job.all_ranks if p.node_pid == failure.pid and p.generation == failure.generation),
                None)
    host, port = (proc.env.get("MASTER_ADDR"), proc.env.get("MASTER_PORT")) if proc is not None else (None, None)
    return f"{host}:{port}" if host and port else None


def own_address(bundle: Bundle, failure: Failure) -> str | None:
    """The line for a rank that failed to reach an address that is not the store its launcher
    named (an init_method or MASTER_PORT of the job's own), None otherwise."""
    named = _named(failure)
    store = _store_of(bundle, failure)
    if store is None or not named or not in_setup(failure) or _peer_connect(failure):
        return None
    port = store.rpartition(":")[2]
    if any(a.rpartition(":")[2] == port or _earlier_owner(bundle, a, failure.generation) for a in named):
        return None
    return (f"rank {failure.rank} tried {', '.join(named)}, not the store its launcher named ({store}): an "
            "address of the job's own (an init_method, a MASTER_ADDR / MASTER_PORT set in the script)")


def _earlier_owner(bundle: Bundle, address: str, generation: int) -> str | None:
    """Whose address this was in an earlier start: a socket of one of its ranks, or the peer its
    ranks' errors named."""
    earlier = {p.pid: p for p in bundle.job.all_ranks if p.generation < generation}
    for snapshot in bundle.samples:
        for sample in snapshot.processes:
            proc = earlier.get(sample.pid)
            if proc is not None and sample.proc is not None and any(
                    s.local in printed_as(address) for s in sample.proc.sockets if s.state == "LISTEN"):
                return f"rank {proc.rank}'s address in {start_name(proc.generation)}"
    by_generation: dict[int, list[ProcessInfo]] = {}
    for proc in bundle.job.all_ranks:
        by_generation.setdefault(proc.generation, []).append(proc)
    for g in sorted(k for k in by_generation if k < generation):
        if any(address == f"{host}:{port}" for _, line in all_lines(_output_of(bundle, g, by_generation))
               for host, port in _ADDRESS.findall(line)):
            return f"a peer's address in {start_name(g)} (its ranks' errors name it)"
    return None


def restart_cause(bundle: Bundle, restarts: Restarts) -> tuple[str, ...]:
    """The cause of a job whose restarts are used up: the last start's own first failure (its rank,
    its error, its time), whose making it was, then the earlier starts as history."""
    last = restarts.last
    if last is None:
        return ()
    start = bundle.samples[0].time if bundle.samples else None
    where = " in init_process_group" if in_setup(last) else ""
    lines = [f"{start_name(last.generation)} failed{where}: {_told(last, start)}"]
    if last.where:
        lines.append(f"  at {last.where}")
    if (why := launcher_made(bundle, last) or own_address(bundle, last)) is not None:
        lines.append(f"  {why}")
    lines += [f"before it, {start_name(f.generation)} failed: {_told(f, start)}" for f in restarts.failures[:-1]]
    return tuple(lines)


def _told(failure: Failure, start: float | None) -> str:
    at = ""
    if failure.time is not None and start is not None:
        off = failure.time - start
        at = f" at +{off:.1f} s" if off >= 0 else f" {-off:.1f} s before the first sample kept"
    said = f": {failure.said[:300]}" if failure.said else ""
    who = f"rank {failure.rank}" if failure.rank is not None else "a rank"
    return f"{who} {failure.how}{at}{said}"
