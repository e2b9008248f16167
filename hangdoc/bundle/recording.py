"""A watch's recording: every round the probes returned, as `hangdoc replay DIR` runs it again.

`hangdoc watch PID --record DIR` (and `run --record DIR`) writes DIR/recording.zst: one zstd
stream of JSON lines, flushed at every round (a watch killed mid-way leaves every round before it
readable). The first line is the header; then each record is two lines, what the round saw
beside its samples (`meta`) and its bundle in the bundle's own v2 JSON (bundle/codec.py), redacted
as a saved bundle is, holding only the samples taken since the record before (the others are the
earlier records'). A record's kinds:

    round     one watch round as `live/step.py` judged it (the time, whether the command ended, ...)
    final     the judgement the watch ended with, and how its evidence ended
    outlived  what the command left running once it ended (`run`)
    cut       the recording reached MAX_RECORDING_BYTES; nothing after it was written

A recording holds what a bundle holds (command lines, paths, output lines, all redacted) round by
round: it is written 0600, in a directory of its own, never over an earlier one.
"""
from __future__ import annotations

import dataclasses
import io
import os
import stat
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import msgspec
import zstandard

from hangdoc.base.errors import BadBundle, BadOutput
from hangdoc.base.limits import MAX_BUNDLE_JSON_BYTES
from hangdoc.bundle import codec
from hangdoc.model import Bundle, Snapshot

FORMAT = "hangdoc/recording-v1"
FILE = "recording.zst"
MAX_RECORDING_BYTES = 512 * 1024 * 1024   # compressed; a watch of weeks stops recording, says so, goes on
MAX_SAMPLES = 600                          # the samples a watch keeps (live/watcher.py), and a replay
_LEVEL = 3


@dataclass(frozen=True)
class Record:
    """One record read back: its kind, what was seen beside the samples, and its bundle (every
    sample so far, as the watch held them at that record)."""

    kind: str
    meta: dict
    bundle: Bundle | None


def recording_file(directory: str | Path) -> Path:
    return Path(directory) / FILE


class Recorder:
    """Writes a watch's rounds to DIR/recording.zst as they come."""

    def __init__(self, directory: str | Path, header: dict):
        self.path, fd = open_new(Path(directory))
        self._file = os.fdopen(fd, "wb")
        self._stream = zstandard.ZstdCompressor(level=_LEVEL).stream_writer(self._file, closefd=False)
        self._sent = 0                  # samples taken, as the watch counted them, when last written
        self._last: Snapshot | None = None
        self.cut = False
        self._line(msgspec.json.encode({"format": FORMAT, **header}))
        self._flush()

    @classmethod
    def of_command(cls, directory: str | Path, command: str, **header) -> Recorder:
        """The recorder of a `watch` or a `run` (`command`); its header names it and hangdoc's version."""
        from hangdoc import __version__

        return cls(directory, {"command": command, "hangdoc": __version__, **header})

    def write(self, kind: str, meta: dict, bundle: Bundle | None = None, taken: int = 0) -> None:
        """One record; `taken`: the samples the watch has taken so far (bundle.samples is the last
        MAX_SAMPLES of them); only those not written yet go in, and the last one again when the
        watch has replaced it since (its output's step is read into it once the output is)."""
        if self.cut or self._file.closed:
            return
        meta = {"kind": kind, **meta}
        if bundle is not None:
            new, replaced = self._new_samples(bundle, taken)
            meta.update(new=len(new), replace_last=replaced)
            data = codec.encode(dataclasses.replace(bundle, samples=new))
        self._line(msgspec.json.encode(meta))
        if bundle is not None:
            self._line(data)
        self._flush()
        if self._file.tell() > MAX_RECORDING_BYTES:
            self._line(msgspec.json.encode({"kind": "cut", "bytes": MAX_RECORDING_BYTES}))
            self._flush()
            self.cut = True

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._stream.close()
        finally:
            self._file.close()

    def _new_samples(self, bundle: Bundle, taken: int) -> tuple[tuple[Snapshot, ...], bool]:
        samples = bundle.samples
        new = min(max(taken - self._sent, 0), len(samples))
        replaced = False
        before = len(samples) - new - 1
        if self._last is not None and before >= 0 and samples[before] is not self._last:
            new, replaced = new + 1, True
        self._sent = max(taken, self._sent)
        self._last = samples[-1] if samples else None
        return tuple(samples[len(samples) - new:]) if new else (), replaced

    def _line(self, data: bytes) -> None:
        self._stream.write(data + b"\n")

    def _flush(self) -> None:
        self._stream.flush(zstandard.FLUSH_BLOCK)
        self._file.flush()


def open_new(directory: Path) -> tuple[Path, int]:
    """DIR/recording.zst, created (with DIR when it is missing) and empty, and its descriptor open
    for writing; never an earlier one."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        try:
            os.makedirs(directory, mode=0o700)
        except OSError as exc:
            raise BadOutput(f"cannot make --record {directory}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise BadOutput(f"cannot write --record {directory}: {exc.strerror or exc}") from None
    else:
        if not stat.S_ISDIR(info.st_mode):
            raise BadOutput(f"--record {directory} is not a directory: name a directory (made when missing) "
                            "for the recording")
    path = directory / FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        raise BadOutput(f"--record {directory} holds a recording already; hangdoc never writes over one: "
                        "name another directory") from None
    except OSError as exc:
        raise BadOutput(f"cannot write --record {directory}: {exc.strerror or exc}") from None
    return path, fd


def read_recording(directory: str | Path) -> tuple[dict, Iterator[Record]]:
    """The header and the records of DIR/recording.zst (or of the file named), one at a time,
    each record's bundle holding every sample so far (the last MAX_SAMPLES); BadBundle with one
    line for anything that is not a recording."""
    path = Path(directory)
    if path.is_dir():
        path = path / FILE
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise BadBundle(f"{path} is not a recording (not a regular file)")
        handle = open(path, "rb")
    except FileNotFoundError:
        raise BadBundle(f"{directory} holds no recording ({FILE}): record one with "
                        "`hangdoc watch PID --record DIR`") from None
    except OSError as exc:
        raise BadBundle(f"cannot read {path}: {exc.strerror or exc}") from None
    reader = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(handle, closefd=True))
    try:
        first = _next_line(reader, path)
        header = _json(first, path, "its header")
    except BaseException:
        reader.close()
        raise
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        reader.close()
        raise BadBundle(f"{path} is not a hangdoc recording (its first line names no {FORMAT})")
    return header, _records(reader, path)


def _records(reader, path: Path) -> Iterator[Record]:
    samples: deque = deque(maxlen=MAX_SAMPLES)
    interner = codec.Interner()
    number = 0
    try:
        while True:
            line = _next_line(reader, path, eof_ok=True)
            if line is None:
                return
            number += 1
            meta = _json(line, path, f"record {number}")
            if not isinstance(meta, dict) or not isinstance(meta.get("kind"), str):
                raise BadBundle(f"{path}: record {number} is not a recording's record")
            bundle = None
            if "new" in meta:
                data = _next_line(reader, path, eof_ok=True)
                if data is None:
                    return          # the watch was killed as it wrote this record: the rounds before it
                try:
                    part = codec.decode(data, interner)
                except (ValueError, msgspec.DecodeError) as exc:
                    raise BadBundle(f"{path}: record {number}'s bundle cannot be read: {str(exc)[:200]}") from None
                if meta.get("replace_last") and samples:
                    samples.pop()
                samples.extend(part.samples)
                bundle = dataclasses.replace(part, samples=tuple(samples))
            yield Record(meta.pop("kind"), meta, bundle)
    finally:
        reader.close()


def _next_line(reader, path: Path, eof_ok: bool = False) -> bytes | None:
    try:
        line = reader.readline(MAX_BUNDLE_JSON_BYTES + 1)
    except zstandard.ZstdError as exc:
        raise BadBundle(f"{path} is not a readable recording (zstd: {exc})") from None
    if not line:
        if eof_ok:
            return None
        raise BadBundle(f"{path} ends in the middle of a record (a watch cut short as it wrote)")
    if len(line) > MAX_BUNDLE_JSON_BYTES:
        raise BadBundle(f"{path}: a record is larger than {MAX_BUNDLE_JSON_BYTES} bytes")
    if not line.endswith(b"\n"):
        if eof_ok:
            return None       # the last record half written (a watch killed as it wrote): the rounds before it
        raise BadBundle(f"{path} ends in the middle of a record (a watch cut short as it wrote)")
    return line


def _json(line: bytes, path: Path, what: str):
    try:
        return msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        raise BadBundle(f"{path}: {what} is not JSON ({exc})") from None
