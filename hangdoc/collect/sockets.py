"""A process's TCP sockets: its descriptors' socket inodes matched to the kernel's tables.

gloo names a peer that left by the address of the connection it lost ("Connection closed by
peer [127.0.0.1]:33674"), the store by its host and port. Which rank held that address is in
/proc: /proc/PID/fd/N links to "socket:[INODE]", and /proc/PID/net/tcp (and tcp6, the tables of
the process's network namespace) give each inode's local and remote address and its state.
"""
from __future__ import annotations

import ipaddress
import os
import sys

from hangdoc.base.names import read_link
from hangdoc.model import TcpSocket

MAX_SOCKETS = 64        # a rank of a big job holds a pair per peer: enough to name its own ports
_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
           "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def tcp_sockets(pid: int, proc_root: str = "/proc") -> tuple[TcpSocket, ...]:
    """The process's TCP sockets, listening ones first; () when it holds none. OSError when its
    descriptors or tables cannot be read (gone, not ours)."""
    inodes = socket_inodes(pid, proc_root)
    return sockets_of(inodes, lambda table: _read_table(pid, table, proc_root)) if inodes else ()


def socket_inodes(pid: int, proc_root: str = "/proc", targets: dict[int, str] | None = None) -> frozenset[str]:
    """The inodes of the sockets the process holds, from its descriptors' links (`targets`: those
    links read already this round, fd -> target)."""
    if targets is None:
        fd_dir = f"{proc_root}/{pid}/fd"
        targets = {}
        for name in os.listdir(fd_dir):
            try:
                targets[int(name)] = read_link(f"{fd_dir}/{name}")
            except (OSError, ValueError):
                continue            # closed between listdir and readlink
    return frozenset(t[8:-1] for t in targets.values() if t.startswith("socket:["))


def sockets_of(inodes: frozenset[str], table_text, matched: set[str] | None = None) -> tuple[TcpSocket, ...]:
    """The sockets of `inodes` in the tcp and tcp6 tables (`table_text(name)`: a table's text,
    None where the kernel has none), listening ones first; `matched` gets the inodes found there."""
    found = []
    for table in ("tcp", "tcp6"):
        text = table_text(table)
        if text is not None:
            found += parse_table(text, inodes, matched)
    found.sort(key=lambda s: (s.state != "LISTEN", s.local))
    return tuple(found[:MAX_SOCKETS])


def _read_table(pid: int, table: str, proc_root: str) -> str | None:
    try:
        with open(f"{proc_root}/{pid}/net/{table}", encoding="ascii", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return None             # no IPv6 in this kernel


# A reading kept for a rank that steps is this many captures old at most (a minute at the default
# interval): a socket's ends do not change, and a rank that stops stepping is read again at once.
KEEP_CAPTURES = 30


class SocketReader:
    """The ranks' TCP sockets, capture after capture, read no more often than the evidence needs.

    A table (/proc/PID/net/tcp) is the kernel's walk of its whole connection hash: milliseconds
    a read on a host with a large one, however few sockets the job holds. Within one capture the
    ranks of a network namespace share one read of it. A rank that steps (`steady`) and still holds
    every TCP socket of its last reading keeps that reading, up to KEEP_CAPTURES captures: what its
    sockets tell (a peer's address, the store reached, a port listened on, a peer gone) matters once
    it stops stepping, and is read again the capture it does, or closes one of them. The sockets it
    opens and closes as it steps (multiprocessing's Unix sockets passing a DataLoader's tensors, a
    connection of its own) bring no read while it steps."""

    def __init__(self) -> None:
        self.captures = 0
        self.kept: dict[int, tuple[frozenset[str], tuple[TcpSocket, ...], int]] = {}   # pid -> (its TCP
        # sockets' inodes, their reading, the capture it was made at)
        self._tables: dict[tuple[str, str], str | None] = {}

    def begin(self) -> None:
        """A new capture: the tables are read again when asked for."""
        self.captures += 1
        self._tables = {}

    def read(self, pid: int, proc_root: str = "/proc", steady: bool = False,
             targets: dict[int, str] | None = None) -> tuple[TcpSocket, ...]:
        """`pid`'s sockets as `tcp_sockets` reads them (OSError alike). `targets`: its descriptors'
        links read already this capture."""
        inodes = socket_inodes(pid, proc_root, targets)
        kept = self.kept.get(pid)
        # Kept while it holds every TCP socket of that reading: the other sockets it opens and closes
        # as it steps (multiprocessing's Unix sockets that pass a DataLoader's tensors) change nothing.
        if steady and kept is not None and kept[0] <= inodes and self.captures - kept[2] < KEEP_CAPTURES:
            return kept[1]
        matched: set[str] = set()
        if not inodes:
            found: tuple[TcpSocket, ...] = ()
        else:
            space = self._namespace(pid, proc_root)
            found = sockets_of(inodes, lambda table: self._table(pid, table, proc_root, space), matched)
        self.kept[pid] = (frozenset(matched), found, self.captures)
        return found

    def _table(self, pid: int, table: str, proc_root: str, space: str | None) -> str | None:
        if space is None:
            return _read_table(pid, table, proc_root)
        if (space, table) not in self._tables:
            self._tables[space, table] = _read_table(pid, table, proc_root)
        return self._tables[space, table]

    @staticmethod
    def _namespace(pid: int, proc_root: str) -> str | None:
        try:
            return read_link(f"{proc_root}/{pid}/ns/net")
        except OSError:
            return None         # not shown: the table is read for this process alone


def parse_table(text: str, inodes: set[str], matched: set[str] | None = None) -> list[TcpSocket]:
    """The rows of a /proc/net/tcp{,6} table whose inode is one of `inodes` (`matched` gets their inodes)."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[9] not in inodes:
            continue
        try:
            rows.append(TcpSocket(_address(fields[1]), _address(fields[2]), _STATES.get(fields[3], fields[3])))
        except ValueError:
            continue
        if matched is not None:
            matched.add(fields[9])
    return rows


def _address(field: str) -> str:
    """"0100007F:80E2" -> "127.0.0.1:33010": the kernel writes the address as 32-bit words in host order."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    text = str(ip) if ip.version == 4 else f"[{ip}]"
    return f"{text}:{int(port, 16)}"
