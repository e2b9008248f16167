"""Count what a checkpoint's pickle makes before torch unpickles it, reading it as a stream.

torch's weights-only unpickler is Python and reads the whole pickle into memory first: 307 KB of
zip holding 300 MiB of `N` opcodes (each pushes a None) took 131 s and 1 GB before any value could
be counted. Here the opcodes are walked as they decompress, each value counted as it is made, and
the walk stops at the budget, in bounded memory; only a pickle within it is handed to torch.
"""
from __future__ import annotations

import io
import pickletools
import zipfile
from pathlib import Path

from hangdoc.base.limits import MAX_CHECKPOINT_PICKLE_BYTES, MAX_CHECKPOINT_PICKLE_VALUES, TooLarge

_OPS = {op.code.encode("latin-1"): op for op in pickletools.opcodes}
# Opcodes that make no value: the mark, the memo's bookkeeping, framing, the end, and those that fill
# or pop what is on the stack already.
_NO_VALUE = frozenset(bytes([code]) for code in b"(pqr\x94\x95\x80.012aesub\x90")
LEGACY_PICKLES = 5     # torch's legacy format: magic number, protocol, system info, the object, storage keys


def scan_checkpoint(path: str | Path, max_values: int = MAX_CHECKPOINT_PICKLE_VALUES,
                    max_bytes: int = MAX_CHECKPOINT_PICKLE_BYTES) -> None:
    """TooLarge when the checkpoint's pickle is larger than `max_bytes` or makes more than `max_values`
    values (a value named again from the memo counted at each use); a file that is no pickle is
    left to torch.load to name."""
    path = Path(path)
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if not names:
                return
            info = archive.getinfo(names[0])
            if info.file_size > max_bytes:
                raise TooLarge(f"its pickle ({names[0]}) is {info.file_size:,} bytes, more than the "
                               f"{max_bytes:,} hangdoc reads")
            with archive.open(info) as member:
                _count(io.BufferedReader(member, 1 << 20), max_values, pickles=1)
        return
    with open(path, "rb") as legacy:
        _count(io.BufferedReader(legacy, 1 << 20), max_values, pickles=LEGACY_PICKLES)


def _count(stream, max_values: int, pickles: int) -> None:
    read = stream.read
    made = 0
    for _ in range(pickles):
        while True:
            code = read(1)
            op = _OPS.get(code)
            if op is None:       # the end of the file, or what is no pickle: torch.load says which
                return
            if op.arg is not None:
                try:
                    op.arg.reader(stream)
                except ValueError:
                    return
            if code == b".":
                break
            if code not in _NO_VALUE:
                made += 1
                if made > max_values:
                    raise TooLarge(f"its pickle makes more than {max_values:,} values")
