"""Group tar member names into utterances the way WeNet's tar reader does.

WeNet splits each name at its last dot into key and extension and starts a new
sample whenever the key changes, so `key.wav` and `key.txt` must be adjacent.
"""
from __future__ import annotations

from collections.abc import Iterable

from hangdoc.check.model import Pairing

AUDIO_EXTENSIONS = frozenset({"flac", "mp3", "m4a", "ogg", "opus", "wav", "wma"})
TEXT_EXTENSION = "txt"


def pair_members(names: Iterable[str]) -> Pairing:
    groups: list[tuple[str, list[str]]] = []
    strays: list[str] = []
    members = 0
    for name in names:
        members += 1
        key, dot, ext = name.rpartition(".")
        if not dot or "/" in ext or (ext not in AUDIO_EXTENSIONS and ext != TEXT_EXTENSION):
            strays.append(name)
            continue
        if groups and groups[-1][0] == key:
            groups[-1][1].append(ext)
        else:
            groups.append((key, [ext]))
    utterances = 0
    unpaired = []
    for key, exts in groups:
        audio = next((e for e in exts if e in AUDIO_EXTENSIONS), None)
        if audio and TEXT_EXTENSION in exts:
            utterances += 1
        elif audio:
            unpaired.append(f"{key}.{audio} has no adjacent {key}.txt")
        else:
            unpaired.append(f"{key}.txt has no adjacent audio member")
    return Pairing(members=members, utterances=utterances, unpaired=tuple(unpaired), strays=tuple(strays))
