"""The library a forked worker is stuck in, named from its native frames (rules/native_libs.py)."""
from __future__ import annotations

import pytest

from hangdoc.model import Frame
from tests.factories import frame
from hangdoc.rules.native_libs import stuck_in


def native(obj: str, name: str = "0x7f0000001000") -> Frame:
    return frame(name, f"/opt/lib/{obj}", native=True)


PYTHON = Frame(name="Collate.__call__", filename="/job/job.py", short_filename="job.py", line=61)
LIBC = native("libc.so.6", "__futex_abstimed_wait_common")


@pytest.mark.parametrize("frames, named, fix", [
    ((LIBC, native("tokenizers.abi3.so", "rayon_core::registry::Registry::in_worker_cold")),
     "Hugging Face tokenizers' rayon pool (tokenizers.abi3.so)", "TOKENIZERS_PARALLELISM=false"),
    ((native("libgomp.so.1"), native("libffi.so.8")), "GNU OpenMP (libgomp.so.1)", "OMP_NUM_THREADS=1"),
    ((LIBC, native("libiomp5.so", "__kmp_suspend_64")), "LLVM / Intel OpenMP (libiomp5.so)", "OMP_NUM_THREADS=1"),
    ((LIBC, native("libmkl_core.so.2")), "Intel MKL (libmkl_core.so.2)", "MKL_NUM_THREADS=1"),
    ((LIBC, native("libopencv_core.so.4.5")), "OpenCV (libopencv_core.so.4.5)", "cv2.setNumThreads(0)"),
    ((LIBC, native("cygrpc.cpython-311-x86_64-linux-gnu.so")),
     "gRPC (cygrpc.cpython-311-x86_64-linux-gnu.so)", "worker_init_fn"),
    ((LIBC, native("libcuda.so.1", "cuInit")), "CUDA (libcuda.so.1)", "main process"),
])
def test_a_known_library_is_named_with_its_own_fix(frames, named, fix):
    # GIVEN a worker's native frames, innermost first, above its Python line
    # WHEN the library is looked up
    stuck = stuck_in(frames + (PYTHON,))
    # THEN the table's entry names it, with its shared object and its own fix
    assert stuck is not None and stuck.name == named
    assert fix in stuck.library.fix


def test_an_unknown_library_is_named_by_its_shared_object_past_libc_and_the_interpreter():
    # GIVEN frames in libc, then a library the table does not know, then the interpreter
    frames = (LIBC, native("libpthread.so.0"), native("libfancyio.so.3", "fancy_wait"),
              native("libpython3.11.so.1.0", "_PyEval_EvalFrameDefault"), PYTHON)
    # WHEN looked up THEN it is named by its shared object, without a table fix
    stuck = stuck_in(frames)
    assert stuck is not None and stuck.name == "libfancyio.so.3" and stuck.library is None
    assert stuck.chain == "libc.so.6: __futex_abstimed_wait_common <- libpthread.so.0 <- libfancyio.so.3: fancy_wait" \
                          " <- libpython3.11.so.1.0: _PyEval_EvalFrameDefault"


def test_a_stack_with_no_library_of_its_own_names_none():
    # GIVEN a Python lock's wait: libc and the interpreter only, or no native frame at all
    # THEN no library is named (worker-deadlock says what the Python frames show)
    assert stuck_in((LIBC, native("python3.11", "take_gil"), PYTHON)) is None
    assert stuck_in((PYTHON,)) is None

