"""Two proofs of a wait cut off from what would end it (`analyze/proofs.py` asks them). Pure.

- pipe-no-writer: a process asleep reading a pipe (or a FIFO whose path is gone) whose write end
  is held by no process that could ever write to it: by the reader itself alone (it kept its own
  copy after a fork, so it never sees the end of the pipe), or by processes asleep in a wait on it
  (a parent in waitpid for the reader, another reader of a pipe none can write), none with a thread
  that could write for it. /proc names each holder (`PipeRead.writers`: every descriptor on the
  node open for writing on the pipe); a pipe that no process holds the write end of ends with EOF,
  and is no hang.
- peer-gone: a rank in a collective whose peer left: a rank of the job that exited with code 0
  while it waits (a failure, or a status unread, is read as a crash: `ending.py`), or whose TCP
  connection to a peer, a rank of the bundle or one that connected to its own listening port, is
  in CLOSE_WAIT: the peer closed its end (its process exited), and it never will again.
"""
from __future__ import annotations

from dataclasses import dataclass

from hangdoc.analyze.classify import Reading, classify_rank
from hangdoc.analyze.proving import (
    RUN_LIMIT, Run, agreeing_in, alive, at_line, cpu_used, named, proven, still_since, who,
)
from hangdoc.model import (
    CHILD_WAIT_WCHANS, Bundle, PipeEnd, PipeRead, ProcessInfo, ProcSample, Proof, ProofKind, RankState, Role,
    Snapshot, Stack, TcpSocket, Wait,
)
from hangdoc.model.stack import own_frame

# --- a pipe no process can write ---------------------------------------------------------------


def pipe_no_writer(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """The rank, a worker of a rank waiting on its data, or a child of a rank waiting for a child,
    asleep reading a pipe that no process could write to, the same pipe at every sample, the
    reader's CPU and every holder's flat."""
    subjects = [rank]
    if reading.state == RankState.DATALOADER:
        subjects += workers
    if reading.detail == Wait.CHILD:
        subjects += [c for c in bundle.job.children_of(rank.pid) if c.role is Role.CHILD and alive(bundle, c.pid)]
    for subject in subjects:
        last = bundle.last.sample_of(subject.pid)
        pipe = last.proc.pipe_read if last is not None and last.proc is not None else None
        if pipe is None or not pipe.sealed or not pipe.writers:
            continue
        run = agreeing_in(bundle, subject.pid, _reads_unwritten(bundle, subject, pipe.target))
        if not proven(run):
            continue
        holders = [p for end in pipe.writers if (p := _holder(bundle, subject, end)) is not None]
        if not all(still_since(bundle, p.pid, run[0][0]) for p in holders):
            continue
        return Proof(ProofKind.PIPE_NO_WRITER.value, run[0][0], run[-1][0],
                     _pipe_said(bundle, rank, subject, pipe, run, reading), subject.node_pid)
    return None


def _reads_unwritten(bundle: Bundle, reader: ProcessInfo, target: str):
    def holds(snapshot: Snapshot, sample: ProcSample) -> bool | None:
        proc = sample.proc
        if proc is None or not proc.full:
            return None
        if not proc.in_pipe_read:
            return False
        if proc.pipe_read is None or proc.pipe_read.writers is None:
            return None         # the read's descriptor, or the node's, not read this round
        return proc.pipe_read.target == target and reader.pid in _unwritable(bundle, snapshot)
    return holds


@dataclass(frozen=True)
class _Reader:
    info: ProcessInfo
    pipe: PipeRead


def _unwritable(bundle: Bundle, snapshot: Snapshot) -> set[int]:
    """The processes of the job asleep at this round reading a pipe that no process could write to:
    every holder of its write end is the reader itself, or in this set, or waits for a child, all
    of whose live children are in this set; and none has a thread that could write for it. The
    largest such set: readers that hold each other's write ends (or wait on each other) stay in it."""
    readers: dict[int, _Reader] = {}
    for info in bundle.job.processes:
        sample = snapshot.sample_of(info.pid)
        proc = sample.proc if sample is not None and sample.alive else None
        if (proc is not None and proc.full and proc.in_pipe_read and proc.pipe_read is not None
                and proc.pipe_read.sealed and proc.pipe_read.writers):
            readers[info.pid] = _Reader(info, proc.pipe_read)
    stuck = set(readers)
    changed = True
    while changed:
        changed = False
        for pid in sorted(stuck):
            reader = readers[pid]
            if not all(_cannot_write(bundle, snapshot, reader, end, stuck) for end in reader.pipe.writers):
                stuck.discard(pid)
                changed = True
    return stuck


def _holder(bundle: Bundle, reader: ProcessInfo, end: PipeEnd) -> ProcessInfo | None:
    """The process of the job holding a write end, named by its pid on the node (a merge may have
    renumbered the job's pids); None: a process outside the job."""
    return bundle.job.info(reader.pid - reader.node_pid + end.pid)


def _cannot_write(bundle: Bundle, snapshot: Snapshot, reader: _Reader, end: PipeEnd, stuck: set[int]) -> bool:
    holder = _holder(bundle, reader.info, end)
    if holder is None:
        return False            # a process outside the job: nothing says it will not write
    sample = snapshot.sample_of(holder.pid)
    proc = sample.proc if sample is not None and sample.alive else None
    if proc is None or not proc.full or not _lone(bundle, holder.pid, snapshot, proc.num_threads,
                                                   _through_mp(bundle, reader.info.pid, snapshot)):
        return False
    if holder.pid == reader.info.pid or holder.pid in stuck:
        return True
    return proc.wchan in CHILD_WAIT_WCHANS and _children_stuck(bundle, snapshot, holder, reader.info, stuck)


def _children_stuck(bundle: Bundle, snapshot: Snapshot, parent: ProcessInfo, reader: ProcessInfo,
                    stuck: set[int]) -> bool:
    """`parent` waits for a child (waitpid): the reader is its child, and so is every live child it
    may be waiting for, each asleep on a pipe none can write (a child that exits would end a wait
    for any child). A wait in subprocess's Popen is for that Popen's child alone: never one of the
    DataLoader workers, which multiprocessing starts."""
    popen = _waits_in_popen(bundle, parent.pid, snapshot.time)
    children = [p.pid for p in bundle.job.processes if p.ppid == parent.pid
                and not (popen and p.role is Role.WORKER)
                and (s := snapshot.sample_of(p.pid)) is not None and s.alive
                and (s.proc is None or s.proc.state not in ("Z", "X"))]
    return reader.pid in children and all(pid in stuck for pid in children)


_POPEN_WAITS = ("Popen.wait", "Popen._wait", "Popen._try_wait")


def _waits_in_popen(bundle: Bundle, pid: int, until: float) -> bool:
    stack = _latest_stack(bundle, pid, until)
    main = stack.main if stack is not None else None
    return main is not None and any(f.filename.endswith("/subprocess.py") and f.name in _POPEN_WAITS
                                    for f in main.frames)


# A thread that may write to a pipe of its process later: the job's own code, a threading.Timer; and,
# where the pipe is read through a multiprocessing queue or connection, that queue's feeder.
_WRITER_FRAMES = ("Timer.run",)
_FEEDER = "Queue._feed"


def _lone(bundle: Bundle, pid: int, snapshot: Snapshot, threads: int, through_mp: bool) -> bool:
    """No thread of the process but the main one could write: it has one thread, or its latest
    stack read shows no other thread in the job's own code or a Timer, nor a queue's feeder where
    the pipe is a multiprocessing queue's (`through_mp`: a feeder writes its own queue's pipe alone,
    as a DataLoader worker's feeds its result queue)."""
    if threads == 1:
        return True
    stack = _latest_stack(bundle, pid, snapshot.time)
    if stack is None:
        return False
    kinds = _WRITER_FRAMES + ((_FEEDER,) if through_mp else ())
    return not any(own_frame(t.frames) is not None or any(f.name.endswith(kinds) for f in t.frames)
                   for t in stack.threads if not t.is_main)


def _through_mp(bundle: Bundle, pid: int, snapshot: Snapshot) -> bool:
    """The reader reads through multiprocessing (a Queue, a Connection), or no stack says otherwise."""
    stack = _latest_stack(bundle, pid, snapshot.time)
    main = stack.main if stack is not None else None
    if main is None:
        return True
    return any(f.short_filename.startswith("multiprocessing/") for f in _leading_frames(main.frames))


def _leading_frames(frames):
    """The frames above the job's own innermost line: what the read was called through."""
    own = own_frame(frames)
    return frames[:frames.index(own)] if own is not None else frames


def _latest_stack(bundle: Bundle, pid: int, until: float) -> Stack | None:
    for snapshot in reversed(bundle.samples[-RUN_LIMIT:]):
        sample = snapshot.sample_of(pid)
        if snapshot.time <= until and sample is not None and sample.stack is not None:
            return sample.stack
    return None


def _pipe_said(bundle: Bundle, rank: ProcessInfo, reader: ProcessInfo, pipe: PipeRead, run: Run,
               reading: Reading) -> str:
    mine = [end for end in pipe.writers if _holder(bundle, reader, end) == reader]
    others = [(end, holder) for end in pipe.writers
              if (holder := _holder(bundle, reader, end)) is not None and holder != reader]
    fds = ", ".join(f"fd {end.fd}" for end in mine)
    if not others:
        held = f"no process but itself holds its write end ({fds}): it can never see the end of the pipe"
    else:
        parts = ([f"itself ({fds})"] if mine else []) + [f"{who(bundle, h)}, fd {end.fd},{_waits(bundle, h)}"
                                                          for end, h in others]
        held = (f"its write end is held only by {' and '.join(parts)}: no process that holds it can ever write "
                "to it, and it never sees the end of the pipe")
    unread = (f" ({pipe.unread} processes of other users could not be read, and are taken not to hold it)"
              if pipe.unread else "")
    tail = ""
    if reader.role is Role.WORKER:
        tail = f"; rank {rank.rank} waits for its data"
    elif reader.role is Role.CHILD and all(h != rank for _, h in others) and reading.detail == Wait.CHILD:
        tail = f"; rank {rank.rank} waits for it to exit"
    span = run[-1][0] - run[0][0]
    return (f"{who(bundle, reader)} reads {pipe.target} (its fd {pipe.fd}){at_line(run)}, asleep in the pipe's "
            f"read at every sample for {span:.1f} s ({cpu_used(run):.2f} s CPU), and {held}{unread}{tail}")


def _waits(bundle: Bundle, proc: ProcessInfo) -> str:
    """What a holder of the write end is stuck in, in words."""
    sample = bundle.last.sample_of(proc.pid)
    stat = sample.proc if sample is not None else None
    stack = _latest_stack(bundle, proc.pid, bundle.last.time)
    frame = own_frame(stack.main.frames) if stack is not None and stack.main is not None else None
    at = f" at {frame.label}" if frame is not None else ""
    if stat is not None and stat.in_pipe_read and stat.pipe_read is not None:
        return f" itself asleep reading {stat.pipe_read.target}{at}, which none of them can write"
    return f" asleep{at} waiting for it to exit"


# --- a collective whose peer left ---------------------------------------------------------------


def peer_gone(bundle: Bundle, rank: ProcessInfo, workers: list[ProcessInfo], reading: Reading) -> Proof | None:
    """The rank waits in a collective, its CPU flat, at every sample since a peer rank exited with
    code 0, or at every sample its connection to a peer shows the peer's end closed."""
    return _peer_exited(bundle, rank, reading) or _peer_closed(bundle, rank, reading)


def _in_collective(snapshot: Snapshot, sample: ProcSample) -> bool | None:
    if sample.stack is None:
        return None
    return classify_rank(sample).state == RankState.COLLECTIVE


def _peer_exited(bundle: Bundle, rank: ProcessInfo, reading: Reading) -> Proof | None:
    left = [(record.time, peer) for peer in bundle.job.ranks
            if peer.pid != rank.pid and peer.generation == rank.generation
            and (record := bundle.exit_of(peer.pid)) is not None and record.code == 0 and record.signal is None]
    if not left:
        return None
    when, peer = min(left, key=lambda item: (item[0], item[1].rank if item[1].rank is not None else -1))
    run = [(t, s) for t, s in agreeing_in(bundle, rank.pid, _in_collective) if t >= when]
    if not proven(run):
        return None
    span, before = run[-1][0] - run[0][0], run[0][0] - when
    ago = f"{before:.1f} s before the first" if before >= 0.05 else "as the first was read"
    return Proof(ProofKind.PEER_GONE.value, run[0][0], run[-1][0],
                 f"{named(rank)} waits in {reading.detail}{at_line(run)} at every sample for {span:.1f} s "
                 f"({cpu_used(run):.2f} s CPU), and its peer rank {peer.rank} (pid {peer.node_pid}) exited with "
                 f"code 0 {ago}: the collective waits for a rank that is gone, and can never complete"
                 f"{_still_open(bundle, rank, peer)}", rank.node_pid,
                 culprits=(peer.rank,) if peer.rank is not None else ())


def _addresses(bundle: Bundle, proc: ProcessInfo) -> set[str]:
    """Every local address `proc` held a socket on, over the samples."""
    return {sock.local for snapshot in bundle.samples[-RUN_LIMIT:] if (s := snapshot.sample_of(proc.pid)) is not None
            and s.proc is not None for sock in s.proc.sockets}


def _still_open(bundle: Bundle, rank: ProcessInfo, peer: ProcessInfo) -> str:
    """What the rank's connection to the peer shows at the last sample: still open (a process the
    peer left behind holds its end: the backend sees no error) or closed."""
    sample = bundle.last.sample_of(rank.pid)
    theirs = _addresses(bundle, peer)
    sock = next((s for s in (sample.proc.sockets if sample is not None and sample.proc is not None else ())
                 if s.remote in theirs), None)
    if sock is None:
        return ""
    if sock.state == "ESTABLISHED":
        return (f" (its connection to rank {peer.rank} at {sock.remote} is still open: a process rank {peer.rank} "
                "left behind holds its end, so the backend sees no error)")
    return f" (its connection to rank {peer.rank} at {sock.remote} is {sock.state})"


def _peer_closed(bundle: Bundle, rank: ProcessInfo, reading: Reading) -> Proof | None:
    last = bundle.last.sample_of(rank.pid)
    if last is None or last.proc is None:
        return None
    owners = {address: peer for peer in bundle.job.ranks if peer.pid != rank.pid
              for address in _addresses(bundle, peer)}
    listening = {s.local.rpartition(":")[2] for snapshot in bundle.samples[-RUN_LIMIT:]
                 if (s_ := snapshot.sample_of(rank.pid)) is not None and s_.proc is not None
                 for s in s_.proc.sockets if s.state == "LISTEN"}
    for sock in last.proc.sockets:
        if sock.state != "CLOSE_WAIT":
            continue
        owner = owners.get(sock.remote)
        if owner is not None and not alive(bundle, owner.pid):
            continue            # a rank that left: its exit tells (a clean one above, else a crash)
        if owner is None and sock.local.rpartition(":")[2] not in listening:
            continue            # a connection of its own to something else (a web service, a log server)

        def closed(snapshot: Snapshot, sample: ProcSample, sock: TcpSocket = sock) -> bool | None:
            if sample.stack is None or sample.proc is None:
                return None
            return classify_rank(sample).state == RankState.COLLECTIVE and any(
                s == sock for s in sample.proc.sockets)

        run = agreeing_in(bundle, rank.pid, closed)
        if not proven(run):
            continue
        if owner is not None:
            peer = f"rank {owner.rank} (pid {owner.node_pid}) at {sock.remote}, whose process still runs,"
        else:
            peer = (f"the peer at {sock.remote} (accepted on its listening port {sock.local.rpartition(':')[2]}; "
                    "no rank of this capture)")
        span = run[-1][0] - run[0][0]
        return Proof(ProofKind.PEER_GONE.value, run[0][0], run[-1][0],
                     f"{named(rank)} waits in {reading.detail}{at_line(run)} at every sample for {span:.1f} s "
                     f"({cpu_used(run):.2f} s CPU), and its connection with {peer} is in CLOSE_WAIT at each: the "
                     "peer closed its end (its process exited, or it left the process group), so the collective "
                     "can never complete", rank.node_pid,
                     culprits=(owner.rank,) if owner is not None and owner.rank is not None else ())
    return None
