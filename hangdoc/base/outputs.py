"""Every file hangdoc writes by name: the bundle (`--out`), the report (`report -o`), `--html`,
`run --junit` and the GitHub step summary; one way for all of them (docs/bundle.md, "Named outputs").

hangdoc runs as root next to production jobs, so a name is checked by what it is (lstat, before
anything is opened): a device, a FIFO, a socket or a directory is refused, never replaced or
written (as root, `--out /dev/null` would replace /dev/null); a symbolic link is refused too,
whatever it points at, with a line that names its target: writing through it would write a file
the link's owner chose, and replacing it would surprise whoever made it. A file is written whole
to a new file beside it (O_CREAT|O_EXCL, mode 0600: it holds the job's command lines and paths)
and renamed over the name, so nothing but the named file changes, and a reader never sees half.
"""
from __future__ import annotations

import errno
import io
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hangdoc.base.errors import BadOutput

MODE = 0o600
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"))


def kind_of(mode: int) -> str | None:
    """What a file that is not a regular file is, in words; None for a regular file."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def refuse_by_type(path: Path, option: str) -> None:
    """BadOutput when `path` exists as anything but a regular file (a link is not followed)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise BadOutput(f"cannot write {option} {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(info.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        try:
            what = kind_of(os.stat(path).st_mode)
            pointed = f"{what or 'a regular file'}"
        except OSError:
            pointed = "nothing (a dangling link)"
        raise BadOutput(f"{option} {path} is a symbolic link to {target} ({pointed}); hangdoc does not "
                        "write through links (as root it would overwrite whatever the link's owner chose): "
                        f"name the file itself ({option} {target}) or remove the link")
    what = kind_of(info.st_mode)
    if what == "a directory":
        raise BadOutput(f"{option} {path} is a directory; give a file name such as {path}/{_example(option)}")
    if what is not None:
        raise BadOutput(f"{option} {path} is {what}, not a regular file: hangdoc writes only regular files "
                        f"(it never replaces or writes a device, FIFO or socket); give a file name")


def _example(option: str) -> str:
    return {"--html": "hang.html", "--junit": "junit.xml", "-o": "report.txt"}.get(option, "bundle.json.zst")


def check_output(path: str | Path, option: str = "--out") -> Path:
    """Fail before the work, not after it, when `path` must not or cannot be written."""
    path = Path(path)
    refuse_by_type(path, option)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise BadOutput(f"cannot write {option} {path}: the directory {parent} does not exist")
    why = unwritable(parent)
    if why is not None:
        raise BadOutput(f"cannot write {option} {path}: {why} in {parent}")
    return path


def unwritable(directory: Path) -> str | None:
    """Why no new file can be made in `directory`, in a few words ("no write permission",
    "Read-only file system"); None when one can."""
    if not os.access(directory, os.W_OK):
        return "no write permission"
    try:     # what access() cannot tell: /proc, a read-only mount, root on a root-squashed share, a removed directory
        fd, probe = tempfile.mkstemp(prefix=".hangdoc-", suffix=".probe", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


@contextmanager
def output_file(path: str | Path, option: str = "--out", *, binary: bool = False) -> Iterator[io.IOBase]:
    """A file to write `path`'s new content into: a temp file (0600) beside it, renamed over `path`
    when the block ends well and removed otherwise. BadOutput when `path` is refused by its type;
    OSError when writing fails (a full disk), for the caller to word."""
    path = Path(path)
    refuse_by_type(path, option)
    fd, tmp = tempfile.mkstemp(prefix=".hangdoc-", suffix=".tmp", dir=str(path.parent) or ".")   # O_EXCL, 0600
    try:
        os.fchmod(fd, MODE)
        with (os.fdopen(fd, "wb") if binary else open(fd, "w", encoding="utf-8", errors="backslashreplace")) as out:
            yield out
        refuse_by_type(path, option)     # swapped for a device or a link while we wrote: leave it be
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_output(path: str | Path, data: bytes | str, option: str = "--out") -> Path:
    """Write `data` as the whole new content of `path` (see `output_file`)."""
    with output_file(path, option, binary=isinstance(data, bytes)) as out:
        out.write(data)
    return Path(path)


def append_output(path: str | Path, text: str, option: str) -> None:
    """Append to a file someone else made (GITHUB_STEP_SUMMARY): only a regular file, never
    through a link, never waiting (a FIFO nobody reads would block for ever)."""
    path = Path(path)
    refuse_by_type(path, option)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, MODE)
    try:
        what = kind_of(os.fstat(fd).st_mode)
        if what is not None:      # swapped in between: not ours to write
            raise BadOutput(f"{option} {path} is {what}, not a regular file; not written")
        data = text.encode("utf-8", "backslashreplace")
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def stdout_stream():
    """sys.stdout, or OSError(EBADF) when the process was started with it closed (`>&-`)."""
    if sys.stdout is None:
        raise OSError(errno.EBADF, "stdout is closed")
    return sys.stdout


def stdout_lost(exc: OSError) -> str:
    """The one line for a report stdout would not take (docs/exit-codes.md: exit 2). What is left in
    stdout's buffer goes to /dev/null, so the interpreter's last flush cannot print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass
    why = exc.strerror or str(exc)
    return (f"the report could not be written to stdout ({why}); write it to a file with -o FILE "
            "or send stdout somewhere that takes it")


def detach_terminal() -> None:
    """After SIGHUP: stdout and stderr that were the terminal now go nowhere, so what is written
    next (the report, a line) cannot fail with EIO on a terminal that is gone and cost the save of
    the bundle; a pipe or a file (a CI log) keeps them."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        for fd in (1, 2):
            try:
                if stat.S_ISCHR(os.fstat(fd).st_mode):     # a hung-up terminal no longer says isatty
                    os.dup2(devnull, fd)
            except OSError:
                continue
    finally:
        os.close(devnull)
