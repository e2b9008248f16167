"""Native frames py-spy cannot name are bare addresses that differ per process: classes ignore them."""
from __future__ import annotations

from pathlib import Path

from hangdoc.analyze.classes import stack_classes
from hangdoc.analyze.diagnose import stack_key
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Frame
from tests.factories import frame

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


def native(name: str) -> Frame:
    return frame(name, LIBC, native=True)


def test_two_ranks_that_differ_only_in_unnamed_addresses_share_a_class_key():
    # GIVEN the same wait in two processes, whose unnamed libc frames sit at randomised addresses
    wait = Frame("all_reduce", "/x/torch/distributed/distributed_c10d.py", "torch/distributed/distributed_c10d.py", 2806)
    a = (native("0x7f856ca98e51"), native("pthread_cond_wait"), wait, native("0x7f856ca2a1ca"))
    b = (native("0x7f8268a98e51"), native("pthread_cond_wait"), wait, native("0x7f8268a2a1ca"))
    # THEN their keys are one; a named native frame, or a Python function, still tells stacks apart
    assert stack_key(a) == stack_key(b)
    assert stack_key(a) != stack_key((native("0x7f856ca98e51"), native("poll"), wait, native("0x7f856ca2a1ca")))
    assert native("0x7f856ca2a1ca").symbol == "?" and native("poll").symbol == "poll"
    assert Frame("0x10", "/job/x.py", "x.py", 3).symbol == "0x10"      # only native frames are addresses


def test_the_real_cuda_job_read_with_native_frames_folds_its_common_start():
    # GIVEN the 2-rank gloo job on a real H200, read with --native (rank 0 in all_reduce, rank 1 in its DataLoader)
    bundle = load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")
    # WHEN its ranks are grouped by stack
    classes = stack_classes(bundle)
    # THEN two classes (they wait in different places) whose outermost frames, once unnamed addresses, match
    assert [c.ranks for c in classes] == [(0,), (1,)]
    outer = [tuple(f.symbol for f in reversed(c.frames))[:3] for c in classes]
    assert outer[0] == outer[1] == ("?", "<module>", "main")
