"""The checks of hangdoc on a real NVIDIA GPU, in one run: what docs/gpu.md reports was measured by this.

    PYTHONPATH=. python3 tests/gpu/device_check.py RESULTS_DIR [--cpu] [--shapes=spin,sleep] [--no-ddp] [--no-nccl]

Not a test (pytest never collects it: CI has no GPU). Each step records what it saw into
RESULTS_DIR (JSON and text files, one summary.json) and goes on when one step fails:
  env      nvidia-smi, the kernel, py-spy, whether the scheduler's per-thread files exist
  check    `hangdoc check env`
  shapes   three processes, one at a time (tests/gpu/jobs/gpu_probe.py: matmul, idle, spin):
           NVML through hangdoc's own session every 0.25 s for 10 s (utilisation, power, SM
           clock, each sample's cost), nvidia-smi and `watch --once` at the same moment,
           py-spy dumps (plain, --locals, --native) timed, and for the spin shape whether the
           main thread spins and whether its `step` local stays still
  nccl     a 1-rank NCCL job: its threads' names, and the backend's timeout the report reads from them
  ddp      a 2-rank gloo job with CUDA tensors on the one GPU (tests/gpu/jobs/ddp_gloo_cuda.py)
           whose rank 1 stalls in its DataLoader, watched with --native: the report, the bundle,
           the HTML page, the ranks' native frames
--cpu runs what can run without a GPU (the ddp job on CPU tensors), to try the script itself.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SAMPLE_FOR_S = 10.0
SAMPLE_EVERY_S = 0.25


class Results:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.summary: dict = {"started": time.time(), "steps": {}}

    def write(self, name: str, content) -> Path:
        path = self.root / name
        path.write_text(content if isinstance(content, str) else json.dumps(content, indent=1, default=str))
        return path

    def step(self, name: str, fn, *args):
        started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            value = fn(*args)
            self.summary["steps"][name] = {"ok": True, "took_s": round(time.monotonic() - started, 2), "value": value}
        except Exception as exc:     # one step's failure is recorded; the others still run
            import traceback
            self.summary["steps"][name] = {"ok": False, "took_s": round(time.monotonic() - started, 2),
                                           "error": f"{type(exc).__name__}: {exc}",
                                           "traceback": traceback.format_exc()}
            print(f"   failed: {exc}", flush=True)
        self.write("summary.json", self.summary)


def sh(cmd: list[str] | str, timeout: float = 60, env: dict | None = None) -> dict:
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, shell=isinstance(cmd, str), capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=REPO)
        return {"cmd": cmd if isinstance(cmd, str) else " ".join(cmd), "rc": done.returncode,
                "stdout": done.stdout[-20000:], "stderr": done.stderr[-8000:],
                "took_s": round(time.monotonic() - started, 3)}
    except subprocess.TimeoutExpired as exc:
        return {"cmd": str(cmd), "rc": None, "timeout": timeout, "stdout": str(exc.stdout or "")[-4000:]}
    except OSError as exc:
        return {"cmd": str(cmd), "rc": None, "error": str(exc)}


def hangdoc(*args: str, timeout: float = 120) -> dict:
    return sh([sys.executable, "-m", "hangdoc", *args], timeout=timeout)


def start(cmd: list[str], env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
    out = open(log, "w") if log else subprocess.DEVNULL
    return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    """End the process and everything under it: torchrun starts each rank in a session of its
    own, so killing the launcher's process group leaves the ranks running."""
    import psutil

    try:
        family = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        family = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for child in family:
        try:
            os.killpg(child.pid, signal.SIGKILL) if os.getpgid(child.pid) == child.pid else child.kill()
        except (ProcessLookupError, psutil.Error, OSError):
            pass
    proc.wait(timeout=30)


def wait_for(path: Path, proc: subprocess.Popen, limit_s: float) -> float:
    started = time.monotonic()
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"the process ended ({proc.returncode}) before it was ready")
        if time.monotonic() - started > limit_s:
            raise RuntimeError(f"not ready after {limit_s:.0f} s")
        time.sleep(0.1)
    return round(time.monotonic() - started, 2)


NVSMI_GPU = ("index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,power.draw,"
             "power.limit,clocks.sm,clocks.max.sm,temperature.gpu,pstate")


def nvidia_smi_now() -> dict:
    return {"gpu": sh(["nvidia-smi", f"--query-gpu={NVSMI_GPU}", "--format=csv"], 20),
            "apps": sh(["nvidia-smi", "--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv"], 20)}


def env_step(cpu: bool) -> dict:
    me = os.getpid()
    sched = Path(f"/proc/{me}/task/{me}/sched")
    facts = {
        "uname": os.uname()._asdict() if hasattr(os.uname(), "_asdict") else list(os.uname()),
        "python": sys.version,
        "py_spy": sh(["py-spy", "--version"], 10),
        "ptrace_scope": _read("/proc/sys/kernel/yama/ptrace_scope"),
        "task_sched_exists": sched.exists(),
        "task_sched_head": _read(str(sched))[:600],
        "schedstat": _read(f"/proc/{me}/task/{me}/schedstat"),
        "proc_version": _read("/proc/version"),
    }
    if not cpu:
        facts["nvidia_smi"] = sh(["nvidia-smi"], 20)
        facts["nvidia_smi_L"] = sh(["nvidia-smi", "-L"], 20)
        facts["torch"] = sh([sys.executable, "-c", "import torch;print(torch.__version__, torch.version.cuda, "
                             "torch.cuda.get_device_name(0))"], 60)
    return facts


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"<{exc.strerror}>"


def check_step(results: Results) -> dict:
    text = hangdoc("check", "env", "--nproc-per-node", "2", "-k", "2")
    data = hangdoc("check", "env", "--nproc-per-node", "2", "-k", "2", "--format", "json")
    results.write("check-env.txt", text.get("stdout", "") + text.get("stderr", ""))
    return {"rc": text.get("rc"), "json": _json_or_text(data.get("stdout", ""))}


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text[-4000:]


def nvml_series(pids: set[int], seconds: float = SAMPLE_FOR_S) -> dict:
    """NVML through hangdoc's own session: one row a sample, and what each sample cost."""
    from hangdoc.collect.gpu import open_nvml

    rows, costs = [], []
    opened = time.perf_counter()
    with open_nvml() as session:
        open_s = time.perf_counter() - opened
        if not session.available:
            return {"unavailable": session.sample().reason}
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            t0 = time.perf_counter()
            state = session.sample()
            costs.append(time.perf_counter() - t0)
            for d in state.devices:
                rows.append({"t": round(time.monotonic() - started, 2), "gpu": d.index, "util": d.utilization_pct,
                             "mem_util": d.memory_util_pct, "power_w": d.power_w, "limit_w": d.power_limit_w,
                             "sm_mhz": d.sm_clock_mhz, "sm_max_mhz": d.sm_clock_max_mhz,
                             "mem_used": d.memory_used_bytes,
                             "pids": [p.pid for p in d.processes], "ours": sorted(pids & {p.pid for p in d.processes})})
            time.sleep(SAMPLE_EVERY_S)
    return {"open_s": round(open_s, 4), "sample_ms": _stats([c * 1000 for c in costs]), "rows": rows,
            "summary": _series_summary(rows)}


def nvml_call_costs(repeat: int = 30) -> dict:
    """Each NVML query hangdoc makes, timed on its own (milliseconds, median and max)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        calls = {
            "GetUtilizationRates": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
            "GetMemoryInfo": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
            "GetPowerUsage": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
            "GetEnforcedPowerLimit": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
            "GetClockInfo(SM)": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "GetMaxClockInfo(SM)": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "GetComputeRunningProcesses": lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
            "GetGraphicsRunningProcesses": lambda: pynvml.nvmlDeviceGetGraphicsRunningProcesses(h),
            "GetSamples(GPU_UTILIZATION)": lambda: pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0),
        }
        out = {}
        for name, call in calls.items():
            times, error = [], None
            for _ in range(repeat):
                t0 = time.perf_counter()
                try:
                    call()
                except pynvml.NVMLError as exc:
                    error = str(exc)
                times.append((time.perf_counter() - t0) * 1000)
            out[name] = {**_stats(times), **({"error": error} if error else {})}
        return out
    finally:
        pynvml.nvmlShutdown()


def nvml_history() -> dict:
    """NVML's own utilisation sample buffer: how far back it reaches at one read."""
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        kinds = {"gpu_util": pynvml.NVML_GPU_UTILIZATION_SAMPLES, "power": pynvml.NVML_TOTAL_POWER_SAMPLES}
        out = {}
        for name, kind in kinds.items():
            try:
                value_type, samples = pynvml.nvmlDeviceGetSamples(h, kind, 0)
                stamps = [s.timeStamp for s in samples]
                values = [_sample_value(s.sampleValue, value_type) for s in samples]
                out[name] = {"n": len(samples), "value_type": value_type,
                             "span_s": round((max(stamps) - min(stamps)) / 1e6, 2) if stamps else 0,
                             "age_of_oldest_s": round(time.time() - min(stamps) / 1e6, 2) if stamps else None,
                             "values_tail": values[-40:]}
            except pynvml.NVMLError as exc:
                out[name] = {"error": str(exc)}
        return out
    finally:
        pynvml.nvmlShutdown()


def _sample_value(value, value_type: int):
    for field in ("uiVal", "ulVal", "ullVal", "dVal", "sllVal"):
        if hasattr(value, field):
            v = getattr(value, field)
            if v:
                return v
    return 0


def _stats(values: list[float]) -> dict:
    if not values:
        return {}
    return {"n": len(values), "median": round(statistics.median(values), 3), "max": round(max(values), 3),
            "min": round(min(values), 3)}


def _series_summary(rows: list[dict]) -> dict:
    out = {}
    for key in ("util", "power_w", "sm_mhz", "mem_util"):
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = _stats(values)
    return out


def pyspy_costs(pid: int, repeat: int = 3) -> dict:
    """What one py-spy dump costs on a process with the CUDA libraries loaded (seconds)."""
    out = {}
    for name, extra in (("plain", []), ("locals", ["--locals"]), ("native", ["--native"]),
                        ("native+locals", ["--native", "--locals"])):
        times, last = [], None
        for _ in range(repeat):
            last = sh(["py-spy", "dump", "--pid", str(pid), "--json", *extra], 60)
            times.append(last.get("took_s", 0))
        out[name] = {**_stats(times), "rc": last.get("rc"), "stderr": (last.get("stderr") or "")[-400:]}
    return out


def main_thread_motion(pid: int, seconds: float = 3.0) -> dict:
    """Over a few seconds: the main thread's CPU, its scheduler clock, and the `step` local twice."""
    def cpu_ticks() -> int:
        fields = _read(f"/proc/{pid}/task/{pid}/stat").rsplit(")", 1)[-1].split()
        return int(fields[11]) + int(fields[12]) if len(fields) > 12 else -1

    def first_locals() -> dict:
        dump = sh(["py-spy", "dump", "--pid", str(pid), "--json", "--locals"], 60)
        try:
            threads = json.loads(dump["stdout"])
        except (ValueError, KeyError):
            return {"error": dump.get("stderr", "")[-400:]}
        for thread in threads:
            for frame in thread.get("frames", []):
                names = {v.get("name"): v.get("repr") for v in frame.get("locals") or []}
                if "step" in names:
                    return {"function": frame.get("name"), "line": frame.get("line"), "step": names["step"],
                            "thread_active": thread.get("active"), "owns_gil": thread.get("owns_gil")}
        return {"frames": [f.get("name") for t in threads for f in t.get("frames", [])][:12]}

    before, ticks0, t0 = first_locals(), cpu_ticks(), time.monotonic()
    sched0 = _read(f"/proc/{pid}/task/{pid}/sched")
    time.sleep(seconds)
    after, ticks1, t1 = first_locals(), cpu_ticks(), time.monotonic()
    sched1 = _read(f"/proc/{pid}/task/{pid}/sched")
    hz = os.sysconf("SC_CLK_TCK")
    return {"locals_before": before, "locals_after": after,
            "main_thread_cpu_share": round((ticks1 - ticks0) / hz / (t1 - t0), 3) if ticks0 >= 0 else None,
            "sched_before": _sched_fields(sched0), "sched_after": _sched_fields(sched1),
            "proc_state": _read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()[:1]}


def _sched_fields(text: str) -> dict:
    keep = ("se.exec_start", "se.sum_exec_runtime", "nr_switches", "nr_voluntary_switches", "nr_involuntary_switches")
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keep:
            out[key.strip()] = value.strip()
    return out or {"raw": text[:200]}


def shape_step(results: Results, mode: str) -> dict:
    ready = results.root / f"{mode}.ready"
    proc = start([sys.executable, str(HERE / "jobs" / "gpu_probe.py"), mode, str(ready)],
                 log=results.root / f"{mode}.log")
    out: dict = {"pid": proc.pid}
    try:
        out["ready_after_s"] = wait_for(ready, proc, 120)
        time.sleep(1.0)
        # the same moment, three readers: nvidia-smi, hangdoc --once, hangdoc's NVML session
        out["nvidia_smi"] = nvidia_smi_now()
        once = hangdoc("watch", "--once", "--single", str(proc.pid), "-o", str(results.root / f"once-{mode}.json"))
        out["watch_once"] = {k: once.get(k) for k in ("rc", "stderr", "took_s")}
        out["nvml"] = nvml_series({proc.pid})
        out["nvidia_smi_after"] = nvidia_smi_now()
        if mode == "matmul":
            out["nvml_call_ms"] = nvml_call_costs()
        if mode in ("matmul", "spin", "sleep", "spin-cpu", "spin-sync"):
            out["pyspy_s"] = pyspy_costs(proc.pid)
            native = sh(["py-spy", "dump", "--pid", str(proc.pid), "--native", "--locals"], 60)
            results.write(f"{mode}-native.txt", native.get("stdout", "") + native.get("stderr", ""))
        if mode in ("spin", "sleep"):
            out["main_thread"] = main_thread_motion(proc.pid)
            out["nvml_history"] = nvml_history()
            watched = hangdoc("watch", "--single", "--native", str(proc.pid), "--no-live", "--interval", "1", "--timeout", "15",
                              "--format", "json", "-o", str(results.root / f"{mode}-bundle.json"), timeout=60)
            results.write(f"{mode}-watch.json", watched.get("stdout", ""))
            out["watch"] = {"rc": watched.get("rc"), "stderr": watched.get("stderr", "")[-3000:],
                            "verdict": _json_or_text(watched.get("stdout", "")).get("verdict")
                            if isinstance(_json_or_text(watched.get("stdout", "")), dict) else None}
    finally:
        stop(proc)
    return out


def ddp_step(results: Results, cpu: bool) -> dict:
    ready, gate = results.root / "ddp.ready", results.root / "ddp.gate"
    env = {"DEVICE": "cpu"} if cpu else {}
    job = start([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                 str(HERE / "jobs" / "ddp_gloo_cuda.py"), str(ready), str(gate)],
                env=env, log=results.root / "ddp-job.log")
    out: dict = {"launcher": job.pid}
    try:
        out["ready_after_s"] = wait_for(ready, job, 180)
        out["nvidia_smi"] = None if cpu else nvidia_smi_now()
        watch_args = [sys.executable, "-m", "hangdoc", "watch", str(job.pid), "--native", "--no-live",
                      "--interval", "1", "--timeout", "100", "--format", "json",
                      "-o", str(results.root / "ddp-bundle.json"), "--html", str(results.root / "ddp.html")]
        watch_log = open(results.root / "ddp-watch.stderr", "w")
        watch_out = open(results.root / "ddp-report.json", "w")
        started = time.monotonic()
        watcher = subprocess.Popen(watch_args, cwd=REPO, stdout=watch_out, stderr=watch_log, start_new_session=True)
        time.sleep(8)                       # hangdoc sees the job step first
        gate.write_text("stall\n")
        out["gate_after_watch_s"] = round(time.monotonic() - started, 2)
        try:
            out["watch_rc"] = watcher.wait(timeout=150)
        except subprocess.TimeoutExpired:
            stop(watcher)
            out["watch_rc"] = "killed after 150 s"
        out["watch_took_s"] = round(time.monotonic() - started, 2)
        out["verdict_after_gate_s"] = round(out["watch_took_s"] - out["gate_after_watch_s"], 2)
        report = _json_or_text((results.root / "ddp-report.json").read_text())
        if isinstance(report, dict):
            out["verdict"] = report.get("verdict")
            out["culprits"] = report.get("culprits") or report.get("culprit")
            out["findings"] = [f.get("slug") or f.get("rule") for f in report.get("findings", [])]
            out["pg_timeout_s"] = report.get("pg_timeout_s")
        text = hangdoc("report", str(results.root / "ddp-bundle.json"))
        results.write("ddp-report.txt", text.get("stdout", "") + text.get("stderr", ""))
        # the ranks' native frames, read directly, for the golden case's README
        ranks = _children_ranks(job.pid)
        for index, pid in enumerate(ranks):
            dump = sh(["py-spy", "dump", "--pid", str(pid), "--native"], 60)
            results.write(f"ddp-rank-pid{pid}-native.txt", dump.get("stdout", "") + dump.get("stderr", ""))
        out["rank_pids"] = ranks
        out["thread_names"] = {pid: sorted({_read(f"/proc/{pid}/task/{tid}/comm").strip()
                                            for tid in os.listdir(f"/proc/{pid}/task")}) for pid in ranks}
    finally:
        stop(job)
    return out


def nccl_step(results: Results) -> dict:
    """A 1-rank NCCL job: its threads' names, and the backend timeout hangdoc's report reads from them."""
    ready = results.root / "nccl.ready"
    job = start([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1",
                 str(HERE / "jobs" / "nccl_one_rank.py"), str(ready)], log=results.root / "nccl-job.log")
    out: dict = {"launcher": job.pid}
    try:
        out["ready_after_s"] = wait_for(ready, job, 180)
        ranks = _children_ranks(job.pid, "nccl_one_rank")
        out["rank_pids"] = ranks
        for pid in ranks:
            out[f"threads_{pid}"] = sorted({_read(f"/proc/{pid}/task/{tid}/comm").strip()
                                            for tid in os.listdir(f"/proc/{pid}/task")})
        bundle = results.root / "nccl-once.json"
        once = hangdoc("watch", "--once", str(job.pid), "-o", str(bundle))
        out["watch_once"] = {k: once.get(k) for k in ("rc", "stderr")}
        report = _json_or_text(hangdoc("report", str(bundle), "--format", "json").get("stdout", ""))
        out["pg_timeout_s"] = report.get("pg_timeout_s") if isinstance(report, dict) else report
    finally:
        stop(job)
    return out


def _children_ranks(launcher: int, script: str = "ddp_gloo_cuda") -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(launcher).children() if script in " ".join(c.cmdline())]
    except psutil.Error:
        return []


def main() -> int:
    root = Path(sys.argv[1])
    cpu = "--cpu" in sys.argv
    results = Results(root)
    results.step("env", env_step, cpu)
    results.step("check", check_step, results)
    shapes = [list(filter(None, a.split("=", 1)[1].split(","))) for a in sys.argv if a.startswith("--shapes=")]
    if not cpu:
        for mode in (shapes[0] if shapes else ("matmul", "idle", "spin", "sleep", "spin-cpu", "spin-sync")):
            results.step(f"shape-{mode}", shape_step, results, mode)
    if "--no-ddp" not in sys.argv:
        results.step("ddp", ddp_step, results, cpu)
    if not cpu and "--no-nccl" not in sys.argv:
        results.step("nccl", nccl_step, results)
    results.summary["took_s"] = round(time.time() - results.summary["started"], 1)
    results.write("summary.json", results.summary)
    print(json.dumps({k: v.get("ok") for k, v in results.summary["steps"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
