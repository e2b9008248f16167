"""Synthetic speech shards in the shape WeNet trains on: tar files of `key.wav` + `key.txt`.

Clips are 16 kHz mono int16 tones with a little noise, written with the standard library's
`wave`. A shard is written member by member; when compressed, every member is its own
compressed stream (the layout `pbzip2` produces, which `tarfile`, `bz2` and `gzip` all read
as one file) so that identical clip payloads are compressed once: a shard that decompresses
to a few hundred MB costs well under a second to generate.
"""
from __future__ import annotations

import array
import bz2
import gzip
import io
import math
import random
import sys
import tarfile
import wave
from pathlib import Path
from typing import Iterable, Iterator

SAMPLE_RATE = 16000
WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go",
         "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")

_SUFFIX = {None: ".tar", "bz2": ".tar.bz2", "gz": ".tar.gz"}
_OWN_STREAM = 64 * 1024
_COMPRESS = {None: lambda data: data,
             "bz2": lambda data: bz2.compress(data, 9),
             "gz": lambda data: gzip.compress(data, 6, mtime=0)}


def synth_wav(seconds: float, *, seed: int, noise: float = 3.0, sample_rate: int = SAMPLE_RATE) -> bytes:
    """The bytes of a mono int16 WAV file: a tone whose pitch depends on `seed`, plus noise."""
    rng = random.Random(seed)
    n = max(1, int(seconds * sample_rate))
    step = 2 * math.pi * rng.uniform(120.0, 900.0) / sample_rate
    amplitude = rng.uniform(1500.0, 6000.0)
    # The standard library only: `hangdoc run` and `demo` import this module and must not need torch.
    gauss, sin = rng.gauss, math.sin
    pcm = array.array("h", (max(-32768, min(32767, round(amplitude * sin(i * step) + noise * gauss(0.0, 1.0))))
                            for i in range(n)))
    if sys.byteorder == "big":
        pcm.byteswap()                   # WAV data is little-endian
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def transcript(seed: int) -> bytes:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))).encode()


def write_tar(path: Path, members: Iterable[tuple[str, bytes]], compression: str | None = None) -> Path:
    """Write `(name, payload)` members as a tar file.

    Compressed, the file is a chain of compressed streams: big payloads get a stream of their
    own, and a payload object seen before reuses its compressed bytes (what makes big shards
    cheap); headers and small payloads are batched into the streams between them.
    """
    compress = _COMPRESS[compression]
    cache: dict[int, tuple[bytes, bytes]] = {}
    pending = bytearray()
    with open(path, "wb") as out:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            info.mode = 0o644
            info.mtime = 1_700_000_000
            pending += info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")
            padded_len = len(payload) + (-len(payload) % tarfile.BLOCKSIZE)
            if padded_len < _OWN_STREAM:
                pending += payload.ljust(padded_len, b"\0")
                continue
            out.write(compress(bytes(pending)))
            pending.clear()
            if id(payload) not in cache:    # the cache keeps the payload alive: ids stay unique
                cache[id(payload)] = (payload, compress(payload.ljust(padded_len, b"\0")))
            out.write(cache[id(payload)][1])
        pending += b"\0" * (2 * tarfile.BLOCKSIZE)
        out.write(compress(bytes(pending)))
    return path


def _mono_members(keys: list[str], clips: list[bytes], seed: int) -> Iterator[tuple[str, bytes]]:
    for i, key in enumerate(keys):
        yield f"{key}.wav", clips[i % len(clips)]
        yield f"{key}.txt", transcript(seed + i)


def _channel_major_members(keys: list[str], clips: list[bytes], seed: int,
                           channels: int) -> Iterator[tuple[str, bytes]]:
    # What a packer that walks ch0/, then ch1/, ... writes: far-apart channels of one utterance.
    for i, key in enumerate(keys):
        yield f"{key}.txt", transcript(seed + i)
        yield f"{key}.ch0.wav", clips[i % len(clips)]
    for ch in range(1, channels):
        for i, key in enumerate(keys):
            yield f"{key}.ch{ch}.wav", clips[(i + ch) % len(clips)]


def make_shards(dir: str | Path, n_shards: int, clips_per_shard: int, clip_seconds: float,
                compression: str | None = None, *, prefix: str = "shard", seed: int = 0,
                distinct_clips: int | None = None, channels: int = 1, noise: float = 3.0) -> list[Path]:
    """Write `n_shards` tar shards of `clips_per_shard` utterances each; return their paths.

    `compression`: None (`.tar`), "bz2" (`.tar.bz2`) or "gz" (`.tar.gz`).
    `distinct_clips`: how many different waveforms a shard cycles through (default: all
    different); a few are enough for big shards and keep generation fast.
    `channels` > 1 stores each channel as its own member (`key.chN.wav`), channel-major.
    """
    if compression not in _SUFFIX:
        raise ValueError(f"compression must be one of {sorted(map(str, _SUFFIX))}, not {compression!r}")
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for s in range(n_shards):
        shard_seed = seed * 1_000_003 + s * 10_007
        n_distinct = min(clips_per_shard, distinct_clips or clips_per_shard)
        clips = [synth_wav(clip_seconds, seed=shard_seed + i, noise=noise) for i in range(n_distinct)]
        keys = [f"{prefix}{s:03d}_utt{i:05d}" for i in range(clips_per_shard)]
        members = (_mono_members(keys, clips, shard_seed) if channels == 1
                   else _channel_major_members(keys, clips, shard_seed, channels))
        paths.append(write_tar(dir / f"{prefix}{s:03d}{_SUFFIX[compression]}", members, compression))
    return paths


def make_clip_files(dir: str | Path, n_files: int, seconds: tuple[float, float] = (1.0, 3.0), *,
                    prefix: str = "clip", seed: int = 0, distinct_clips: int = 8) -> list[Path]:
    """Write `n_files` WAV files of one utterance each, `seconds` long (min, max); return their paths.

    The files cycle through `distinct_clips` waveforms of lengths spread over `seconds`, so a
    corpus of thousands of files costs a few syntheses.
    """
    dir = Path(dir)
    dir.mkdir(parents=True, exist_ok=True)
    low, high = seconds
    spread = [low + (high - low) * i / max(distinct_clips - 1, 1) for i in range(distinct_clips)]
    clips = [synth_wav(length, seed=seed * 1_000_003 + i) for i, length in enumerate(spread)]
    paths = []
    for i in range(n_files):
        path = dir / f"{prefix}{i:06d}.wav"
        path.write_bytes(clips[i % len(clips)])
        paths.append(path)
    return paths


def write_list(paths: Iterable[str | Path], file: str | Path) -> Path:
    """Write a WeNet-style shard list: one shard path per line."""
    file = Path(file)
    file.write_text("".join(f"{p}\n" for p in paths))
    return file
