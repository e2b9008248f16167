"""Write WeNet-style tar shards and data lists: for the benchmark, the tests and the docs.

A shard holds `key.wav` + `key.txt` pairs; `drop` leaves members out (a broken pair),
`extra` adds stray members, `compression` packs it as .tar.bz2 / .tar.gz / .tar.xz.
"""
from __future__ import annotations

import io
import json
import random
import tarfile
from collections.abc import Iterable, Sequence
from pathlib import Path

MODES = {"none": "w", "bz2": "w:bz2", "gzip": "w:gz", "xz": "w:xz"}


def write_shard(path: str | Path, keys: Iterable[str], *, compression: str = "none", wav_bytes: int = 4000,
                drop: Sequence[str] = (), extra: Sequence[str] = (), seed: int = 0) -> Path:
    path = Path(path)
    rng = random.Random(seed)
    with tarfile.open(path, MODES[compression]) as tar:
        for key in keys:
            for name, data in ((f"{key}.wav", rng.randbytes(wav_bytes)), (f"{key}.txt", f"text of {key}".encode())):
                if name not in drop:
                    _add(tar, name, data)
        for name in extra:
            _add(tar, name, b"stray")
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_list(path: str | Path, lines: Iterable[str]) -> Path:
    path = Path(path)
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def write_raw_list(path: str | Path, rows: Iterable[tuple[str, str, str]]) -> Path:
    """A raw list: one JSON object with key, wav and txt per line."""
    return write_list(path, (json.dumps({"key": k, "wav": w, "txt": t}) for k, w, t in rows))
