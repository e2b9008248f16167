"""What a DataLoader worker's stack and files say of its data: the compression it reads through
(a file's suffix, a decompressor's frames) and a decoder reading straight from a tar member."""
from __future__ import annotations

from hangdoc.base.compression import BZ2, GZIP, XZ, ZLIB, ZSTD
from hangdoc.model import Bundle, Frame
from hangdoc.rules.samples import recent_worker_frames


COMPRESSED_SUFFIXES = {".bz2": BZ2, ".tbz2": BZ2, ".tbz": BZ2, ".gz": GZIP, ".tgz": GZIP,
                       ".xz": XZ, ".lzma": XZ, ".txz": XZ, ".zst": ZSTD, ".zstd": ZSTD}
DECOMPRESS_FILES = {"bz2.py": BZ2, "lzma.py": XZ, "gzip.py": GZIP, "zlib": ZLIB,
                    "_compression.py": None, "zstandard": ZSTD, "zstd": ZSTD}


def compression_of_path(path: str) -> str | None:
    for suffix, kind in COMPRESSED_SUFFIXES.items():
        if path.endswith(suffix):
            return kind
    return None


def compression_of_frames(frames) -> str | None:
    """"bz2", "gzip", "xz", "zlib", "zstd", or "" (only `_compression` / `decompress`) from a stack; None."""
    generic = False
    for frame in frames:
        for needle, kind in DECOMPRESS_FILES.items():
            if needle in frame.filename:
                if kind:
                    return kind
                generic = True
        generic = generic or "decompress" in frame.name.lower()
    return "" if generic else None


_TAR_MEMBER_READS = ("_FileInFile.", "ExFileObject.", "_Stream.")
_DECODERS = ("wave.py", "aifc.py", "sunau.py", "soundfile", "torchaudio", "librosa", "audioread",
             "scipy/io/wavfile", "av/", "PIL/", "cv2")


def is_decoder_library(frame: Frame) -> bool:
    return any(p in frame.filename for p in _DECODERS)


def is_decoder(frame: Frame) -> bool:
    return "tarfile.py" not in frame.filename and (
        any(p in frame.filename for p in _DECODERS) or "decode" in frame.name.lower())


def member_decode(frames) -> tuple[Frame, Frame] | None:
    """(decoder frame, tar member read frame) when a decoder reads straight from a tar member.

    `frames` innermost first: the first frame outside tarfile.py above (called before) the
    member's read must be a decoder; a dataset function that reads the bytes and decodes them
    afterwards never has the decoder on the stack during the read.
    """
    frames = tuple(frames)
    for i, frame in enumerate(frames):
        if "tarfile.py" in frame.filename and frame.name.startswith(_TAR_MEMBER_READS):
            caller = next((f for f in frames[i + 1:] if "tarfile.py" not in f.filename), None)
            if caller is not None and is_decoder(caller):
                return caller, frame
            return None
    return None


def member_decode_frames(bundle: Bundle, pid: int, recent: int = 8) -> tuple[Frame, ...] | None:
    """A worker's recent frames that show a decoder reading straight from a tar member."""
    return recent_worker_frames(bundle, pid, member_decode, recent)
