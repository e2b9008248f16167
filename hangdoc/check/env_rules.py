"""Findings about the host and the launch settings: pure functions of `EnvFacts`."""
from __future__ import annotations

import os

from hangdoc.check.findings import MAX_EVIDENCE, ordered
from hangdoc.base.words import plural, size
from hangdoc.check.model import EnvFacts
from hangdoc.base.errors import PTRACE_HELP, PY_SPY_HELP
from hangdoc.model import Finding, Rule, Severity, finding
from hangdoc.rules.fork_unsafe_arm import RULE as FORK_UNSAFE_ARM
from hangdoc.rules.gpu_starved import RULE as GPU_STARVED

ARM = ("aarch64", "arm64")


def env_findings(facts: EnvFacts) -> tuple[Finding, ...]:
    found: list[Finding] = []
    found += fork_unsafe_arm(facts)
    found += cpu_oversubscribed(facts)
    found += no_workers(facts)
    found += shm_too_small(facts)
    found += ptrace_denied(facts)
    found += py_spy_missing(facts)
    found += nvml_unavailable(facts)
    found += collective_timeout_disabled(facts)
    return ordered(found)


def fork_unsafe_arm(facts: EnvFacts) -> list[Finding]:
    workers = facts.launch.num_workers
    if facts.arch not in ARM or facts.start_method != "fork" or not facts.openmp_libs or workers == 0:
        return []
    libs = ", ".join(sorted({os.path.basename(lib) for lib in facts.openmp_libs}))
    return [finding(FORK_UNSAFE_ARM, (),
                    f"{facts.arch} host forks DataLoader workers and has {libs}: forked workers may "
                    "segfault in arm_compute::OMPScheduler",
                    [f"architecture: {facts.arch}",
                     f"multiprocessing start method: {facts.start_method} (DataLoader's default)",
                     f"OpenMP / Arm Compute Library: {', '.join(facts.openmp_libs)}"],
                    severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


def cpu_oversubscribed(facts: EnvFacts) -> list[Finding]:
    launch = facts.launch
    if not launch.num_workers:
        return []
    workers = launch.num_workers * launch.nproc_per_node
    if workers <= facts.cpu.usable:
        return []
    quota = f", cgroup quota {facts.cpu.quota:g} cores" if facts.cpu.quota else ""
    return [finding(CPU_OVERSUBSCRIBED, (),
                    f"{plural(launch.nproc_per_node, 'rank')} x {plural(launch.num_workers, 'worker')} = "
                    f"{workers} DataLoader workers "
                    f"on {plural(facts.cpu.usable, 'usable CPU')}",
                    [f"CPUs: {facts.cpu.online} online, {facts.cpu.usable} usable{quota}",
                     f"{facts.cpu.usable} usable CPUs / {launch.nproc_per_node} ranks: at most "
                     f"{plural(max(1, facts.cpu.usable // launch.nproc_per_node), 'worker')} per rank"],
                    severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


def no_workers(facts: EnvFacts) -> list[Finding]:
    if facts.launch.num_workers != 0:
        return []
    return [finding(GPU_STARVED, (),
                    "num_workers=0: each rank's main thread reads and decodes its data between steps",
                    [f"{facts.cpu.usable} usable CPUs for {facts.launch.nproc_per_node} ranks"],
                    severity=Severity.INFO, max_evidence=MAX_EVIDENCE)]


def shm_too_small(facts: EnvFacts) -> list[Finding]:
    launch, shm = facts.launch, facts.shm
    if not launch.num_workers or not launch.batch_bytes:
        return []
    need = launch.nproc_per_node * launch.num_workers * launch.prefetch_factor * launch.batch_bytes
    evidence = [f"{plural(launch.nproc_per_node, 'rank')} x {plural(launch.num_workers, 'worker')} x prefetch_factor "
                f"{launch.prefetch_factor} x {size(launch.batch_bytes)} per batch = {size(need)}"]
    if shm.total_bytes is None:
        return [finding(SHM_TOO_SMALL, (), f"{shm.path} is not mounted: workers cannot "
                        "share batches with their rank", evidence,
                        severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]
    evidence.append(f"{shm.path}: {size(shm.total_bytes)}, {size(shm.free_bytes or 0)} free")
    if need > shm.total_bytes:
        return [finding(SHM_TOO_SMALL, (),
                        f"prefetched batches need {size(need)} of shared memory, {shm.path} holds "
                        f"{size(shm.total_bytes)}: workers die with a Bus error", evidence,
                        severity=Severity.CRITICAL, max_evidence=MAX_EVIDENCE)]
    if need > (shm.free_bytes or 0):
        return [finding(SHM_TOO_SMALL, (),
                        f"prefetched batches need {size(need)} of shared memory, {shm.path} has "
                        f"{size(shm.free_bytes or 0)} free", evidence,
                        severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]
    return []


def ptrace_denied(facts: EnvFacts) -> list[Finding]:
    pt = facts.ptrace
    if pt.can_attach:
        return []
    why = {1: "only a process's ancestors may trace it", 2: "only CAP_SYS_PTRACE may trace",
           3: "no process may be traced"}.get(pt.scope, "")
    return [finding(PTRACE_DENIED, (),
                    "py-spy will not be allowed to read the stacks of a job hangdoc did not start",
                    [f"kernel.yama.ptrace_scope = {pt.scope} ({why})",
                     f"CAP_SYS_PTRACE: {'yes' if pt.cap_sys_ptrace else 'no'}; uid {pt.uid}",
                     PTRACE_HELP], severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


def py_spy_missing(facts: EnvFacts) -> list[Finding]:
    spy = facts.py_spy
    if spy.path and spy.version:
        return []
    title = "py-spy is not installed" if not spy.path else f"py-spy at {spy.path} does not run"
    return [finding(PY_SPY_MISSING, (), title + ": hangdoc cannot read stacks",
                    [spy.error or "", PY_SPY_HELP], severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


def nvml_unavailable(facts: EnvFacts) -> list[Finding]:
    if facts.nvml.available:
        return []
    return [finding(NVML_UNAVAILABLE, (), "NVML is unavailable: no GPU utilisation in diagnoses",
                    [facts.nvml.reason or "unknown reason"], severity=Severity.INFO, max_evidence=MAX_EVIDENCE)]


def collective_timeout_disabled(facts: EnvFacts) -> list[Finding]:
    off = [k for k in ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")
           if facts.collective_env.get(k) == "0"]
    if not off:
        return []
    return [finding(COLLECTIVE_TIMEOUT_DISABLED, (),
                    f"{off[0]}=0: a hung NCCL collective never times out",
                    [f"{k}=0" for k in off], severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)]


# The slugs this checker declares, once: the registry (hangdoc/registry.py) reads RECORDS, so
# `hangdoc rules` lists them and `hangdoc explain` shows their pages; each finding is built from one.
CPU_OVERSUBSCRIBED = Rule(
    slug="cpu-oversubscribed",
    title='More DataLoader workers than CPU cores on the node',
    severity=Severity.WARNING,
    summary='`nproc_per_node x num_workers` (plus the ranks themselves) is more than the CPUs the job may'
            ' use (cgroup quota and affinity): DataLoader workers fight for cores, batches arrive late, '
            'and the GPUs wait.',
    fix='Use at most cores / ranks-per-node workers per rank and set OMP_NUM_THREADS=1 in workers; '
        'oversubscribed workers deliver less, not more.',
    commands=("check",),
)

PTRACE_DENIED = Rule(
    slug="ptrace-denied",
    title="py-spy will not be allowed to read the job's stacks",
    severity=Severity.WARNING,
    summary='py-spy could not attach to a process hangdoc did not start: `kernel.yama.ptrace_scope` or a '
            'container without SYS_PTRACE forbids it, so `hangdoc watch` would read no stacks on this '
            'machine.',
    fix="Run hangdoc as the job's user or root, set kernel.yama.ptrace_scope=0, or start the "
        'container with --cap-add=SYS_PTRACE.',
    commands=("check",),
)

PY_SPY_MISSING = Rule(
    slug="py-spy-missing",
    title='py-spy is not installed',
    severity=Severity.WARNING,
    summary='py-spy is not on PATH (or does not run here): `hangdoc watch` cannot read any stack, and '
            'diagnoses would rest on /proc alone.',
    fix='pip install py-spy (the wheel carries the binary).',
    commands=("check",),
)

NVML_UNAVAILABLE = Rule(
    slug="nvml-unavailable",
    title='NVML cannot be read: GPU utilisation will be missing from diagnoses',
    severity=Severity.INFO,
    summary='NVML cannot be read (no driver, no GPU, a container without the NVIDIA libraries), with the '
            'reason: diagnoses carry no GPU utilisation, power or clocks.',
    fix='Install the NVIDIA driver (libnvidia-ml.so.1) or run where the GPUs are visible.',
    commands=("check",),
)

SHM_TOO_SMALL = Rule(
    slug="shm-too-small",
    title='/dev/shm cannot hold the batches the DataLoader workers prefetch',
    severity=Severity.CRITICAL,
    summary='The batches DataLoader workers prefetch (`num_workers x prefetch_factor x batch bytes` per '
            "rank) exceed `/dev/shm`'s size (critical: workers die with a bus error) or its free space "
            '(warning), or `/dev/shm` is not mounted (warning).',
    fix='Enlarge /dev/shm (docker --shm-size=16g, Kubernetes: an emptyDir with medium: Memory) or '
        'lower num_workers / prefetch_factor.',
    commands=("check",),
)

COLLECTIVE_TIMEOUT_DISABLED = Rule(
    slug="collective-timeout-disabled",
    title='A hung collective will never time out',
    severity=Severity.WARNING,
    summary='`TORCH_NCCL_ASYNC_ERROR_HANDLING=0` (or an equivalent) is set: a hung collective never times'
            ' out, so a hang holds the GPUs until someone notices.',
    fix='Unset TORCH_NCCL_ASYNC_ERROR_HANDLING=0 (and NCCL_ASYNC_ERROR_HANDLING=0) so the '
        'process-group timeout ends a hung job with an error.',
    commands=("check",),
)

RECORDS = (CPU_OVERSUBSCRIBED, PTRACE_DENIED, PY_SPY_MISSING, NVML_UNAVAILABLE, SHM_TOO_SMALL,
           COLLECTIVE_TIMEOUT_DISABLED)
# The live rules' records this checker raises too; they are declared (and registered) with their
# rule, in hangdoc/rules/.
SHARED = (FORK_UNSAFE_ARM, GPU_STARVED)
