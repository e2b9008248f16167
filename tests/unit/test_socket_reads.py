"""The ranks' sockets read no more often than the evidence needs (collect/sockets.py: SocketReader)."""
from __future__ import annotations

import os

from hangdoc.collect.sockets import KEEP_CAPTURES, SocketReader
from hangdoc.model import TcpSocket

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(inode: int, local: str, remote: str, state: str) -> str:
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n"


LISTEN = row(555, "0100007F:AC1F", "00000000:0000", "0A")            # 127.0.0.1:44063, listening
TO_STORE = row(556, "0100007F:9C40", "0100007F:7531", "02")          # to the store at :30001, SYN_SENT
TO_STORE_UP = row(556, "0100007F:9C40", "0100007F:7531", "01")       # ... then ESTABLISHED


class Tree:
    """A /proc tree of ranks that share one network namespace."""

    def __init__(self, root, pids=(7,), namespace="net:[4026531840]"):
        self.root = root
        for pid in pids:
            (root / str(pid) / "fd").mkdir(parents=True)
            (root / str(pid) / "net").mkdir()
            (root / str(pid) / "ns").mkdir()
            os.symlink(namespace, root / str(pid) / "ns" / "net")
        self.pids = pids

    def holds(self, pid, fd, inode):
        os.symlink(f"socket:[{inode}]", self.root / str(pid) / "fd" / str(fd))

    def closes(self, pid, fd):
        os.unlink(self.root / str(pid) / "fd" / str(fd))

    def table(self, *rows):
        for pid in self.pids:
            (self.root / str(pid) / "net" / "tcp").write_text(HEADER + "".join(rows))


def counting(monkeypatch):
    """Counts the opens of a network table."""
    import builtins

    seen = []
    real = builtins.open

    def open_(path, *a, **k):
        if str(path).endswith(("/net/tcp", "/net/tcp6")):
            seen.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(builtins, "open", open_)
    return seen


def test_a_stepping_rank_keeps_its_reading_and_a_new_socket_is_read_once_it_stops_stepping(tmp_path, monkeypatch):
    # GIVEN rank pid 7 listening on 127.0.0.1:44063, read once
    tree = Tree(tmp_path)
    tree.holds(7, 3, 555)
    tree.table(LISTEN)
    reads = counting(monkeypatch)
    reader = SocketReader()
    reader.begin()
    first = reader.read(7, str(tmp_path))
    assert first == (TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"),)
    # WHEN it steps and holds the same socket at the next capture
    reader.begin()
    opened = len(reads)
    # THEN its reading is kept: no table is read
    assert reader.read(7, str(tmp_path), steady=True) == first and len(reads) == opened
    # WHEN it opens another socket while still stepping (a DataLoader's Unix socket, or a connection)
    tree.holds(7, 4, 556)
    tree.table(LISTEN, TO_STORE)
    reader.begin()
    # THEN its TCP socket is still held: the reading is kept, what it steps with tells nothing new
    assert reader.read(7, str(tmp_path), steady=True) == first and len(reads) == opened
    # WHEN it stops stepping THEN the table is read again and the new socket is there
    reader.begin()
    got = reader.read(7, str(tmp_path), steady=False)
    assert len(reads) > opened and TcpSocket("127.0.0.1:40000", "127.0.0.1:30001", "SYN_SENT") in got


def test_a_rank_that_does_not_step_is_read_every_capture_so_a_changed_state_shows(tmp_path):
    # GIVEN a rank connecting to the store (SYN_SENT), read once
    tree = Tree(tmp_path)
    tree.holds(7, 4, 556)
    tree.table(TO_STORE)
    reader = SocketReader()
    reader.begin()
    assert reader.read(7, str(tmp_path))[0].state == "SYN_SENT"
    # WHEN the connection comes up, same socket, and the rank did not step
    tree.table(TO_STORE_UP)
    reader.begin()
    # THEN the new state is read
    assert reader.read(7, str(tmp_path), steady=False)[0].state == "ESTABLISHED"


def test_a_kept_reading_is_read_again_after_a_few_captures_and_when_a_socket_closes(tmp_path):
    # GIVEN a stepping rank with two sockets, read once
    tree = Tree(tmp_path)
    tree.holds(7, 3, 555)
    tree.holds(7, 4, 556)
    tree.table(LISTEN, TO_STORE)
    reader = SocketReader()
    reader.begin()
    reader.read(7, str(tmp_path))
    # WHEN its connection comes up while it steps
    tree.table(LISTEN, TO_STORE_UP)
    states = []
    for _ in range(KEEP_CAPTURES):
        reader.begin()
        states.append(reader.read(7, str(tmp_path), steady=True)[1].state)
    # THEN the reading is kept fewer than KEEP_CAPTURES captures, then read again
    assert states[:KEEP_CAPTURES - 1] == ["SYN_SENT"] * (KEEP_CAPTURES - 1) and states[-1] == "ESTABLISHED"
    # WHEN it closes the connection
    tree.closes(7, 4)
    reader.begin()
    # THEN the next capture says so
    assert reader.read(7, str(tmp_path), steady=True) == (TcpSocket("127.0.0.1:44063", "0.0.0.0:0", "LISTEN"),)


def test_ranks_of_one_network_namespace_share_one_read_of_its_table_within_a_capture(tmp_path, monkeypatch):
    # GIVEN two ranks in one network namespace, each with its socket
    tree = Tree(tmp_path, pids=(7, 8))
    tree.holds(7, 3, 555)
    tree.holds(8, 3, 556)
    tree.table(LISTEN, TO_STORE)
    reads = counting(monkeypatch)
    reader = SocketReader()
    # WHEN one capture reads both
    reader.begin()
    seven, eight = reader.read(7, str(tmp_path)), reader.read(8, str(tmp_path))
    # THEN each has its own socket, from one read of the table (tcp6 is absent here)
    assert [s.local for s in seven] == ["127.0.0.1:44063"] and [s.local for s in eight] == ["127.0.0.1:40000"]
    assert len([p for p in reads if p.endswith("/tcp")]) == 1
    # AND the next capture reads it again
    reader.begin()
    reader.read(8, str(tmp_path))
    assert len([p for p in reads if p.endswith("/tcp")]) == 2
