"""One CUDA process in one of three shapes, to see what NVML reads of each on a real GPU.

    python gpu_probe.py matmul|idle|spin|sleep|spin-cpu|spin-sync READY_FILE

matmul: a bf16 matrix-product loop (real work); idle: a CUDA context holding memory, no
kernel; spin: a few steps of work, then one kernel that spins reading a flag in GPU memory
(the shape of an NCCL wait) while the main thread blocks in `.item()` behind it. The spin
is bounded (about 90 s of SM clock) so a forgotten process frees the GPU by itself. spin-cpu and
spin-sync: the same spin with the main thread blocked in `.cpu()` or `torch.cuda.synchronize()`
instead (the native frames of each sync point, for hangdoc's classifier).
READY_FILE is written once the shape is under way.
"""
from __future__ import annotations

import sys
import time

import torch

SPIN_SOURCE = r"""
extern "C" __global__ void spin(volatile const int* flag, long long budget) {
    long long start = clock64();
    while (*flag == 0) {
        if (clock64() - start > budget) break;
    }
}
"""
SPIN_CYCLES = 120 * 2_000_000_000    # ~120 s at 2 GHz


def ready(path: str) -> None:
    with open(path, "w") as f:
        f.write("ready\n")


def launch_spin(flag: torch.Tensor) -> str:
    """Start the flag-reading spin kernel on torch's current stream; say which kernel ran."""
    try:
        import cupy
        import numpy

        kernel = cupy.RawKernel(SPIN_SOURCE, "spin")
        flag_array = cupy.asarray(flag)
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            kernel((4,), (128,), (flag_array, numpy.int64(SPIN_CYCLES)))
        return "cupy flag-spin"
    except Exception as exc:          # no CuPy: torch's own clock-spin kernel
        print(f"gpu_probe: cupy spin unavailable ({exc}); torch.cuda._sleep instead", file=sys.stderr)
        torch.cuda._sleep(SPIN_CYCLES)
        return "torch.cuda._sleep"


def main() -> None:
    mode, ready_path = sys.argv[1], sys.argv[2]
    dev = torch.device("cuda")
    if mode == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        step = 0
        while True:
            c = a @ b
            step += 1
            if step % 20 == 0:
                torch.cuda.synchronize()
            if step == 40:
                ready(ready_path)
    elif mode == "idle":
        held = torch.zeros(256 * 1024 * 1024, device=dev, dtype=torch.uint8)
        torch.cuda.synchronize()
        ready(ready_path)
        while held.numel():
            time.sleep(1)
    elif mode in ("spin", "sleep", "spin-cpu", "spin-sync"):
        x = torch.randn(1024, 1024, device=dev)
        flag = torch.zeros(1, dtype=torch.int32, device=dev)
        total = torch.zeros((), device=dev)
        step = 0
        for step in range(1, 21):
            x = torch.tanh(x @ x)
            torch.cuda.synchronize()
        t0 = time.monotonic()
        if mode != "sleep":
            kind = launch_spin(flag)
        else:
            torch.cuda._sleep(SPIN_CYCLES)
            kind = "torch.cuda._sleep"
        launched = time.monotonic() - t0
        ready(ready_path)
        torch.sum(x, dim=(0, 1), out=total)   # queued behind the spinning kernel, into memory held already
        print(f"gpu_probe: {kind} launched at step {step} in {launched:.3f} s, queued in "
              f"{time.monotonic() - t0:.3f} s", file=sys.stderr, flush=True)
        if mode == "spin-cpu":
            value = float(total.cpu())   # blocks in cudaMemcpy while the kernel spins
        elif mode == "spin-sync":
            torch.cuda.synchronize()     # blocks in cudaDeviceSynchronize while the kernel spins
            value = 0.0
        else:
            value = total.item()         # blocks here while the kernel spins
        print(f"gpu_probe: released after {time.monotonic() - t0:.1f} s ({value})", file=sys.stderr)
    else:
        raise SystemExit(f"gpu_probe: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
