"""The native libraries a forked DataLoader worker gets stuck in, named from its native frames.

A library that runs a thread pool (or holds a lock) in the parent leaves the forked child a copy
of its state without its threads: the child's first call into it waits for ever. Each entry names
the library and the fix that library itself offers; an unknown one is named by its shared object.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from hangdoc.model import Bundle, Frame, Stack
from hangdoc.rules.samples import samples_of


@dataclass(frozen=True)
class NativeLib:
    name: str                      # "GNU OpenMP"
    pattern: re.Pattern            # matched against a native frame's object file and its symbol
    why: str                       # what goes wrong after fork, in a clause
    fix: str


_SPAWN = "or start the workers with spawn (DataLoader(multiprocessing_context='spawn'))."

LIBRARIES = (
    NativeLib("Hugging Face tokenizers' rayon pool", re.compile(r"tokenizers|rayon", re.I),
              "the parent tokenized in parallel before the fork; the rayon pool's threads stay behind",
              "Set TOKENIZERS_PARALLELISM=false before the DataLoader forks, or do not call the tokenizer "
              "in the parent before it forks (tokenize inside the workers), " + _SPAWN),
    NativeLib("GNU OpenMP", re.compile(r"libgomp|\bgomp_", re.I),
              "the parent ran an OpenMP parallel region before the fork; the pool's threads stay behind",
              "Run no OpenMP region in the parent before the DataLoader forks (call torch.set_num_threads(1) "
              "before building it, or build it first), or set OMP_NUM_THREADS=1 for the workers, " + _SPAWN),
    NativeLib("LLVM / Intel OpenMP", re.compile(r"lib(?:i?omp5?|omp)[.-]|__kmp", re.I),
              "the parent ran an OpenMP parallel region before the fork; the pool's threads stay behind",
              "Run no OpenMP region in the parent before the DataLoader forks, or set OMP_NUM_THREADS=1 "
              "for the workers, " + _SPAWN),
    NativeLib("Intel MKL", re.compile(r"libmkl_|\bmkl_", re.I),
              "the parent ran an MKL routine on its threads before the fork",
              "Set MKL_NUM_THREADS=1 (and OMP_NUM_THREADS=1) for the job, or run no MKL call in the parent "
              "before the DataLoader forks, " + _SPAWN),
    NativeLib("OpenCV", re.compile(r"libopencv|cv2[./]|\bcv::", re.I),
              "the parent used OpenCV's thread pool before the fork",
              "Call cv2.setNumThreads(0) before the DataLoader forks (OpenCV then runs without its pool), "
              + _SPAWN),
    NativeLib("gRPC", re.compile(r"grpc", re.I),
              "the parent opened a gRPC channel (a cloud-storage or RPC client) before the fork; its threads "
              "and locks stay behind",
              "Create the client in worker_init_fn (or lazily inside the worker), not in the parent before "
              "the DataLoader forks, or set GRPC_ENABLE_FORK_SUPPORT=1, " + _SPAWN),
    NativeLib("CUDA", re.compile(r"libcuda|libcudart|libnvrtc|libcublas", re.I),
              "CUDA was initialised in the parent; a forked child cannot use it",
              "Keep CUDA out of the Dataset and the collate function (move batches to the GPU in the main "
              "process), " + _SPAWN),
)

# Objects every native stack passes through: never the library a worker is stuck in.
_PLUMBING = re.compile(r"^(?:libc[.-]|libpthread|ld-linux|libpython|python\d|libffi|_ctypes|libstdc\+\+|"
                       r"libgcc_s|libm[.-]|libdl[.-]|librt[.-]|\[|0x)", re.I)


@dataclass(frozen=True)
class Stuck:
    """Where a worker's native frames stand: the library, its shared object and the frames."""

    library: NativeLib | None      # None: not in the table, named by `shared_object`
    shared_object: str             # "libgomp.so.1"
    frames: tuple[Frame, ...]      # the native frames, innermost first, down to the first Python frame

    @property
    def name(self) -> str:
        """"GNU OpenMP (libgomp.so.1)", or the shared object alone."""
        return f"{self.library.name} ({self.shared_object})" if self.library else self.shared_object

    @property
    def chain(self) -> str:
        """The native frames, innermost first, a run of one object's frames said once:
        "libgomp.so.1 <- libffi.so.8: ffi_call <- callproc.c: _call_function_pointer"."""
        runs: list[tuple[str, list[str]]] = []
        for frame in self.frames:
            if not runs or runs[-1][0] != frame.short_filename:
                runs.append((frame.short_filename, []))
            if frame.symbol != "?" and frame.symbol not in runs[-1][1]:
                runs[-1][1].append(frame.symbol)
        return " <- ".join(f"{obj}: {', '.join(names)}" if names else obj for obj, names in runs)


def stuck_in(frames: tuple[Frame, ...]) -> Stuck | None:
    """The library a native stack (innermost first) is stuck in: the innermost frame a table entry
    names, else the innermost shared object that is not plumbing (libc, the interpreter, libffi)."""
    native = tuple(f for f in frames[:next((i for i, f in enumerate(frames) if not f.native), len(frames))])
    for frame in native:
        for lib in LIBRARIES:
            if lib.pattern.search(frame.short_filename) or lib.pattern.search(frame.symbol):
                return Stuck(lib, frame.short_filename, native)
    for frame in native:
        if ".so" in frame.short_filename and not _PLUMBING.match(frame.short_filename):
            return Stuck(None, frame.short_filename, native)
    return None


def native_probe(bundle: Bundle, pid: int) -> tuple[float, Stack] | None:
    """(time, stack) of the newest native probe of `pid` (hangdoc's own, once per stack) with native
    frames in its main thread; None where there was none."""
    for t, sample in reversed(samples_of(bundle, pid)):
        stack = sample.stack
        if stack is not None and stack.probe and stack.main is not None \
                and any(f.native for f in stack.main.frames):
            return t, stack
    return None
