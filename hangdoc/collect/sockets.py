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
    fd_dir = f"{proc_root}/{pid}/fd"
    inodes = set()
    for name in os.listdir(fd_dir):
        try:
            target = read_link(f"{fd_dir}/{name}")
        except OSError:
            continue            # closed between listdir and readlink
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    if not inodes:
        return ()
    found = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc_root}/{pid}/net/{table}", encoding="ascii", errors="replace") as f:
                text = f.read()
        except FileNotFoundError:
            continue            # no IPv6 in this kernel
        found += parse_table(text, inodes)
    found.sort(key=lambda s: (s.state != "LISTEN", s.local))
    return tuple(found[:MAX_SOCKETS])


def parse_table(text: str, inodes: set[str]) -> list[TcpSocket]:
    """The rows of a /proc/net/tcp{,6} table whose inode is one of `inodes`."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[9] not in inodes:
            continue
        try:
            rows.append(TcpSocket(_address(fields[1]), _address(fields[2]), _STATES.get(fields[3], fields[3])))
        except ValueError:
            continue
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
