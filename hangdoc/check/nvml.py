"""Can NVML be read here? One small probe that never raises.

It asks `hangdoc.collect.gpu.sample_gpus`, the one module that owns pynvml, and falls back
to a bare `pynvml.nvmlInit()` only if that module cannot be imported.
"""
from __future__ import annotations

from hangdoc.check.model import NvmlFacts


def probe_nvml() -> NvmlFacts:
    try:
        from hangdoc.collect.gpu import sample_gpus
    except ImportError:
        return _bare_probe()
    try:
        state = sample_gpus()
    except Exception as exc:  # a probe that fails is a recorded reason, not a crash
        return NvmlFacts(False, f"NVML probe failed: {exc}")
    return NvmlFacts(state.available, state.reason, state.driver_version, len(state.devices))


def _bare_probe() -> NvmlFacts:
    try:
        import pynvml
    except ImportError:
        return NvmlFacts(False, "pynvml is not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return NvmlFacts(False, f"NVML could not be initialised: {exc}")
    try:
        return NvmlFacts(True, None, pynvml.nvmlSystemGetDriverVersion(), pynvml.nvmlDeviceGetCount())
    except Exception as exc:
        return NvmlFacts(False, f"NVML could not count the GPUs: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
