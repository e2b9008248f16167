"""Errors that carry their exit code and teach the fix, said once, here.

Exit codes (documented in docs/exit-codes.md):
  0  healthy / nothing found        3  hang detected
  1  `check` found problems         4  the job crashed
  2  usage, attach or input error   5  the job ended, cause unknown
  6  report printed, bundle not saved   7  suspect: ranks split, not seen long enough to tell
  130 stopped by Ctrl-C (SIGINT)    143 stopped by SIGTERM or SIGHUP
"""
from __future__ import annotations

import os
import signal

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_HANG = 3
EXIT_CRASH = 4
EXIT_ENDED_UNKNOWN = 5
EXIT_NOT_SAVED = 6
EXIT_SUSPECT = 7      # one instant, or not long enough: ranks split, no progress seen
EXIT_SLOW = 8         # it moves, but slowly: a straggler or its data costs every step (run: with --fail-on slow)
EXIT_SIGINT = 130
EXIT_SIGTERM = 143
# The signals that stop a command, and the code each leaves with. SIGHUP (an ssh session dropped, a CI
# runner that closed its terminal) is a SIGTERM: the report so far, the bundle kept, `run`'s job ended.
STOP_SIGNALS = {signal.SIGINT: EXIT_SIGINT, signal.SIGTERM: EXIT_SIGTERM, signal.SIGHUP: EXIT_SIGTERM}


class HangdocError(Exception):
    """An error the user can act on: one line, an exit code, no traceback."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


PTRACE_HELP = (
    "py-spy needs ptrace rights over the job's processes. Either run hangdoc as the job's "
    "user (or root); or allow ptrace of non-children: "
    "`echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope` (now 1: only descendants may be traced); "
    "in a container, start it with `--cap-add=SYS_PTRACE` "
    "(Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])."
)

PY_SPY_HELP = (
    "py-spy was not found next to this Python nor on PATH; install it with "
    "`pip install py-spy` (the wheel carries the binary) or pass --py-spy PATH "
    "(where py-spy does not run, `pip install pystack` and pass --engine pystack)."
)
PYSTACK_HELP = (
    "--engine pystack needs bloomberg's pystack in hangdoc's Python: `pip install pystack` "
    "(Linux wheels for x86_64 and aarch64), or use the default engine, py-spy."
)


class NoSuchProcess(HangdocError):
    def __init__(self, pid: int):
        super().__init__(f"no process with pid {pid} (it may have exited); `hangdoc ps` lists the jobs on this node")


class NotPython(HangdocError):
    def __init__(self, pid: int, exe: str):
        super().__init__(
            f"pid {pid} ({exe}) is not a Python process and has no torchrun job below it; "
            "give the pid of the launcher, a rank or a DataLoader worker"
        )


class NotDistributed(HangdocError):
    def __init__(self, pid: int, why: str = ""):
        if why:
            super().__init__(f"pid {pid} is not a distributed job yet: {why}; is it the right pid? "
                             "`hangdoc ps` lists this node's jobs")
            return
        super().__init__(
            f"pid {pid} is a Python process but not part of a distributed job "
            "(no RANK/WORLD_SIZE in its environment nor among its children); "
            "add --single to snapshot it on its own"
        )


class PtraceDenied(HangdocError):
    def __init__(self, pid: int, detail: str = ""):
        why = f" ({detail})" if detail else ""
        super().__init__(f"cannot read the stack of pid {pid}: ptrace denied{why}. {PTRACE_HELP}")


class ProcessNotReadable(HangdocError):
    def __init__(self, pid: int, as_root: bool | None = None):
        as_root = (os.geteuid() == 0) if as_root is None else as_root
        if as_root:
            # Root already: what refuses is a namespace or a security module, not the user.
            super().__init__(
                f"cannot read /proc/{pid}/environ: permission denied even to root, so pid {pid} is outside what "
                "this hangdoc may inspect (another container's or a sandbox's process, or a security module such as "
                "Yama or AppArmor refusing it). Is it the job? Run hangdoc inside the job's container, or give that "
                "container CAP_SYS_PTRACE (--cap-add=SYS_PTRACE)."
            )
            return
        super().__init__(
            f"cannot read /proc/{pid}/environ: permission denied, so pid {pid} belongs to another user. "
            f"Run hangdoc as the job's user (e.g. `sudo -u <user> hangdoc ...`) or as root; "
            "in a container, run it inside the job's container or with --cap-add=SYS_PTRACE."
        )


class PySpyMissing(HangdocError):
    def __init__(self):
        super().__init__(PY_SPY_HELP)


class PyStackMissing(HangdocError):
    def __init__(self):
        super().__init__(PYSTACK_HELP)


class BadBundle(HangdocError):
    pass


class BadOutput(HangdocError):
    pass


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: stop, keep what was gathered, exit 130 or 143."""

    def __init__(self, exit_code: int = EXIT_SIGINT):
        super().__init__()
        self.exit_code = exit_code


class BundleNotSaved(HangdocError):
    exit_code = EXIT_NOT_SAVED
