"""How the zoo's job reads its shards: tar members to waveforms to features.

The WeNet ways of reading a tar shard of `key.wav` + `key.txt` (in order, shuffled by random
access, or decoding straight from the members' file objects), the WAV decoding, and the
fbank stand-in the model trains on. `train.py` (beside it; torchrun runs it as a script, so it
imports this as `audio`) picks the reader its scenario needs.
"""
from __future__ import annotations

import io
import random
import tarfile
import zlib
import wave

import torch
import torch.nn.functional as F

FEATURES = 40


def pcm_to_tensor(frames: bytes) -> torch.Tensor:
    if not frames:
        return torch.zeros(0)
    return torch.frombuffer(bytearray(frames), dtype=torch.int16).float() / 32768.0


def decode_wav(data: bytes) -> torch.Tensor:
    """Decode a WAV from bytes already read out of the tar (the right way)."""
    with wave.open(io.BytesIO(data)) as w:
        return pcm_to_tensor(w.readframes(w.getnframes()))


def decode_channels(files: list, block: int = 1600) -> torch.Tensor:
    """Decode a recording kept as one file per channel straight from the file objects.

    Streaming block by block, all channels in lockstep, keeps memory flat; on members of a
    compressed tar every switch between channels is a seek in the decompressed stream.
    """
    readers = [wave.open(f) for f in files]
    mixed = []
    while True:
        chans = [pcm_to_tensor(r.readframes(block)) for r in readers]
        n = min(len(c) for c in chans)
        if n == 0:
            break
        mixed.append(sum(c[:n] for c in chans) / len(chans))
    return torch.cat(mixed) if mixed else torch.zeros(1)


def group_members(tar: tarfile.TarFile) -> dict[str, dict[str, tarfile.TarInfo]]:
    """{key: {"txt": m, "wav": m}} (or "ch0.wav", "ch1.wav", ...) from every header in the tar."""
    groups: dict[str, dict[str, tarfile.TarInfo]] = {}
    for member in tar.getmembers():
        key, _, ext = member.name.partition(".")
        groups.setdefault(key, {})[ext] = member
    return groups


def read_sequential(path: str):
    """WeNet's `tar_file_and_group`: walk the members in order, pair key.txt with key.wav."""
    with tarfile.open(path, "r:*") as tar:
        sample: dict = {}
        for member in tar:
            key, _, ext = member.name.partition(".")
            if sample and sample["key"] != key:
                yield sample
                sample = {}
            sample["key"] = key
            data = tar.extractfile(member).read()
            if ext == "txt":
                sample["txt"] = data.decode()
            elif ext == "wav":
                sample["wav"] = decode_wav(data)
        if sample:
            yield sample


def read_shuffled(path: str, seed: int):
    """Shuffle a shard's utterances, then read each one by random access (label first)."""
    with tarfile.open(path, "r:*") as tar:
        groups = group_members(tar)
        keys = list(groups)
        random.Random(seed).shuffle(keys)
        for key in keys:
            text = tar.extractfile(groups[key]["txt"]).read().decode()
            audio = decode_wav(tar.extractfile(groups[key]["wav"]).read())
            yield {"key": key, "txt": text, "wav": audio}


def read_checked(path: str, index: dict[str, int], on_retry=None):
    """Read every utterance, checking its audio against the shard's index of CRCs, and read an
    utterance again until it matches (a flaky mount's torn read). With a stale index one never
    matches: on a .tar.bz2 each retry seeks back to the same member, decompressing from the
    file's start to it again, for ever."""
    with tarfile.open(path, "r:*") as tar:
        for key, parts in group_members(tar).items():
            while True:
                data = tar.extractfile(parts["wav"]).read()
                if zlib.crc32(data) == index.get(key, zlib.crc32(data)):
                    break
                if on_retry is not None:
                    on_retry(key)
            text = tar.extractfile(parts["txt"]).read().decode()
            yield {"key": key, "txt": text, "wav": decode_wav(data)}


def read_from_member_files(path: str):
    """Decode every utterance straight from `tar.extractfile(member)`, no bytes read first."""
    with tarfile.open(path, "r:*") as tar:
        for key, parts in group_members(tar).items():
            text = tar.extractfile(parts["txt"]).read().decode()
            wavs = [tar.extractfile(parts[ext]) for ext in sorted(parts) if ext.endswith("wav")]
            yield {"key": key, "txt": text, "wav": decode_channels(wavs)}


# --- features ----------------------------------------------------------------------------

WINDOW = torch.hann_window(400)


def features(wav: torch.Tensor) -> torch.Tensor:
    """40 log band energies averaged over time: a stand-in for fbank."""
    if len(wav) < 400:
        wav = F.pad(wav, (0, 400 - len(wav)))
    frames = wav.unfold(0, 400, 160) * WINDOW
    power = torch.fft.rfft(frames).abs()[:, :200] ** 2
    bands = power.reshape(len(frames), FEATURES, 5).mean(-1)
    return torch.log1p(bands * 1000.0).mean(0)
