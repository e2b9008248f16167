"""Reading a training command line: which data list it names."""
from __future__ import annotations

_LIST_FLAGS = ("data_list", "data-list", "train_data", "train-data", "shard_list", "shard-list",
               "datalist", "data_file", "train_list", "train-list")
_LIST_SUFFIXES = (".list", ".lst", ".shards", ".jsonl")


def data_list(cmdline: tuple[str, ...]) -> str | None:
    """The shard/data list a training command line names, if it names one."""
    for i, word in enumerate(cmdline):
        flag, eq, value = word.partition("=")
        if flag.lstrip("-").lower() in _LIST_FLAGS:
            if eq:
                return value
            if i + 1 < len(cmdline):
                return cmdline[i + 1]
    return next((w for w in cmdline[1:] if w.endswith(_LIST_SUFFIXES)), None)
