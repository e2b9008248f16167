"""Group tar member names into samples the way the reader of that shard layout does.

Two layouts are understood:
- *speech* (WeNet): each name splits at its last dot into key and extension, a new sample
  starts whenever the key changes, and a sample is `key.<audio>` + `key.txt`, adjacent. A
  shard is read this way when it holds audio members and either transcripts or nothing else.
- *webdataset* (every other shard: images with labels, captions, JSON, arrays): the key is
  the name up to the first dot of its base name (`a/b.seg.png` -> key `a/b`, field `seg.png`),
  adjacent members with one key make a sample, and a sample is whole when it has the fields
  most samples of its shard have (an image in any format counts as the image). Members
  without an extension are skipped by webdataset, and here.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from hangdoc.check.model import Pairing

AUDIO_EXTENSIONS = frozenset({"flac", "mp3", "m4a", "ogg", "opus", "wav", "wma"})
TEXT_EXTENSION = "txt"
IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "ppm", "pgm", "pbm", "pnm", "bmp", "gif", "tif", "tiff"})
VIDEO_EXTENSIONS = frozenset({"mp4", "webm", "avi", "mkv", "mov"})
# The fields webdataset's decoders know besides media: labels, captions, metadata, arrays, tensors.
WEBDATASET_FIELDS = frozenset({"cls", "cls2", "index", "inx", "id", "txt", "text", "transcript", "json", "jsn",
                               "cbor", "pyd", "pickle", "pth", "npy", "npz", "ten", "tb", "mp", "msgpack"})
SPEECH, WEBDATASET = "speech", "webdataset"
_WDS_NAME = re.compile(r"^((?:.*/|)[^./]+)[.]([^/]*)$")   # webdataset's base_plus_ext
_FAMILIES = ((IMAGE_EXTENSIONS, "image"), (AUDIO_EXTENSIONS, "audio"), (VIDEO_EXTENSIONS, "video"))


def pair_members(names: Iterable[str]) -> Pairing:
    names = list(names)
    if layout_of(names) == SPEECH:
        return _pair_speech(names)
    return _pair_webdataset(names)


def layout_of(names: list[str]) -> str:
    """"speech" for WeNet's key.<audio> + key.txt shards, "webdataset" for the others."""
    exts = [name.rpartition(".")[2].lower() for name in names if "." in name.rpartition("/")[2]]
    audio = any(e in AUDIO_EXTENSIONS for e in exts)
    if audio and (TEXT_EXTENSION in exts or all(e in AUDIO_EXTENSIONS for e in exts)):
        return SPEECH
    return WEBDATASET if exts else SPEECH


def _pair_speech(names: list[str]) -> Pairing:
    groups: list[tuple[str, list[str]]] = []
    strays: list[str] = []
    for name in names:
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
    return Pairing(members=len(names), utterances=utterances, unpaired=tuple(unpaired), strays=tuple(strays),
                   layout=SPEECH)


def _family(field: str) -> str:
    lower = field.lower()
    return next((family for exts, family in _FAMILIES if lower in exts), lower)


def _pair_webdataset(names: list[str]) -> Pairing:
    groups: list[tuple[str, list[str]]] = []
    for name in names:
        m = _WDS_NAME.match(name)
        if m is None:
            continue
        key, field = m.groups()
        if groups and groups[-1][0] == key:
            groups[-1][1].append(field)
        else:
            groups.append((key, [field]))
    # The fields most samples have are the sample; a field only some have is optional.
    having = Counter(family for _, fields in groups for family in {_family(f) for f in fields})
    expected = {family for family, n in having.items() if 2 * n > len(groups)}
    # Each expected field by its usual name in this shard: ".jpg" for the images, ".cls" for the labels.
    named = {}
    for family in expected:
        usual = Counter(f.lower() for _, fields in groups for f in fields if _family(f) == family)
        named[family] = "." + usual.most_common(1)[0][0]
    whole = 0
    unpaired = []
    for key, fields in groups:
        twice = sorted({f for f in fields if fields.count(f) > 1})
        missing = sorted(named[f] for f in expected - {_family(f) for f in fields})
        if twice:
            unpaired.append(f"{key}.{twice[0]} appears twice in one sample (webdataset refuses the sample)")
        elif missing:
            have = " + ".join(f".{f}" for f in fields)
            unpaired.append(f"{key} has {have} but no {' and no '.join(missing)}, which most samples of its shard have")
        else:
            whole += 1
    return Pairing(members=len(names), utterances=whole, unpaired=tuple(unpaired), layout=WEBDATASET)
