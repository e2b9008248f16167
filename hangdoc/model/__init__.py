"""The plain data at hangdoc's centre: what a capture holds (`capture`, its stacks in `stack`, what
a process sleeps on in the kernel in `kernel`, the job's own collective record in `flight`, the
programs a rank runs under in `wrapper`), a node's own reading of its ranks (`digest`), what a
report says (`report`), and the record every slug is declared by (`rule`), over one vocabulary (`vocab`). Frozen dataclasses and enums only; each room's schema version lives beside it.

Every name is importable from `hangdoc.model` itself.
"""
from hangdoc.model.vocab import (
    Ending, Engine, GpuActivity, Progress, ProofKind, RankState, Role, Severity, SlowKind, SplitCause, StopReason, Verdict,
    Wait, Word,
    WorkerState,
)
from hangdoc.model.stack import Frame, FrameMark, LoopMark, Stack, Thread, is_job_file
from hangdoc.model.flight import FlightRecord, FrConfig, FrEntry, FrFrame, FrGroup, RasComm, RasStatus
from hangdoc.model.capture import (
    BUNDLE_SCHEMA, PID_STRIDE, Bundle, DataListCopy, FdLink, GpuDevice, GpuProcess, GpuState, Host, IoCounters, Job,
    LogTail, OomCount, OpenFile, Options, ProcessExit, ProcessInfo, ProcSample, ProcStat, ShmUse, Snapshot, TcpSocket,
    ThreadCounters, CpuQuota,
)
from hangdoc.model.kernel import (
    CHILD_WAIT_WCHANS, FILE_LOCK_WCHANS, MAX_PIPE_WRITERS, PIPE_READ_WCHANS, FileLock, PipeEnd, PipeRead,
)
from hangdoc.model.wrapper import Wrapper
from hangdoc.model.digest import DIGEST_VERSION, DigestWorker, NodeDigest, Proof, RankDigest, ShareCounts, StepSummary
from hangdoc.model.report import (
    REPORT_SCHEMA, BeforeAttach, Finding, FlightSummary, GpuTrend, Lane, RankGpu, RankReport, Report, RestartMark,
    Span, StackClass,
    DataPace, Slowness, Threshold, TimeShares, RUNQUEUE_SAID, Witness, WorkerReport,
)
from hangdoc.model.rule import Cause, Rule, finding
from hangdoc.model.source import SourceBlock, SourceFunction

__all__ = [
    "SplitCause",
    "SourceBlock",
    "SourceFunction",
    "Ending",
    "Engine",
    "SlowKind",
    "Progress",
    "RankState",
    "Role",
    "Severity",
    "StopReason",
    "GpuActivity",
    "Verdict",
    "Wait",
    "ProofKind",
    "Proof",
    "Word",
    "WorkerState",
    "BUNDLE_SCHEMA",
    "PID_STRIDE",
    "Bundle",
    "DataListCopy",
    "FILE_LOCK_WCHANS",
    "FdLink",
    "FileLock",
    "CHILD_WAIT_WCHANS",
    "MAX_PIPE_WRITERS",
    "PIPE_READ_WCHANS",
    "PipeEnd",
    "PipeRead",
    "FlightRecord",
    "FrConfig",
    "FrEntry",
    "FrFrame",
    "FrGroup",
    "Frame",
    "FrameMark",
    "GpuDevice",
    "GpuProcess",
    "GpuState",
    "Host",
    "IoCounters",
    "Job",
    "LogTail",
    "LoopMark",
    "OomCount",
    "OpenFile",
    "Options",
    "ProcessExit",
    "ProcessInfo",
    "ProcSample",
    "Wrapper",
    "ProcStat",
    "RasComm",
    "RasStatus",
    "ShmUse",
    "CpuQuota",
    "Snapshot",
    "Stack",
    "TcpSocket",
    "Thread",
    "ThreadCounters",
    "is_job_file",
    "DIGEST_VERSION",
    "DigestWorker",
    "NodeDigest",
    "RankDigest",
    "ShareCounts",
    "StepSummary",
    "REPORT_SCHEMA",
    "BeforeAttach",
    "FlightSummary",
    "GpuTrend",
    "Lane",
    "Span",
    "DataPace",
    "Slowness",
    "StackClass",
    "Finding",
    "RankGpu",
    "RankReport",
    "Report",
    "RestartMark",
    "Threshold",
    "Witness",
    "TimeShares", "RUNQUEUE_SAID",
    "WorkerReport",
    "Cause",
    "Rule",
    "finding",
]
