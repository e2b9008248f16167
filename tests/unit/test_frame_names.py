"""A C++ frame prints as its qualified function name, in every format: py-spy's demangled symbols
of torch's pybind11 bindings and dispatcher run to thousands of characters."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from hangdoc.base.symbols import symbol_name
from hangdoc.bundle.files import load_bundle
from hangdoc.model import Frame
from hangdoc.render.formats import OutputFormat, render_report
from hangdoc.report import judge

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

# Read with `py-spy dump --native` from a 1-rank gloo job spinning on `work.wait(timeout)` (torch 2.13).
PYBIND_WAIT = 'pybind11::cpp_function::initialize<pybind11::cpp_function::cpp_function<bool, c10d::Work, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >, pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::name const, pybind11::is_method&, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654])::{lambda(c10d::Work*, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >)#1}, bool, c10d::Work*, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >, pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::cpp_function::cpp_function<bool, c10d::Work, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >, pybind11::name, pybind11::is_method, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654]>(pybind11::name const, pybind11::is_method&, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654])::{lambda(c10d::Work*, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >&&)#1}, bool (*)(c10d::Work*, std::chrono::duration<long, std::ratio<(long)1, (long)1000> >), pybind11::name const, pybind11::is_method&, pybind11::sibling, pybind11::arg_v, pybind11::call_guard<pybind11::gil_scoped_release>, char [654])::{lambda(pybind11::detail::function_call&)#1}::_FUN'
BOXED_CALL = 'c10::impl::BoxedKernelWrapper<c10::intrusive_ptr<c10d::Work, c10::detail::intrusive_target_default_null_type<c10d::Work> >(at::Tensor, c10::intrusive_ptr<c10d::ProcessGroup, c10::detail::intrusive_target_default_null_type<c10d::ProcessGroup> > const&, std::vector<long, std::allocator<long> > const&, bool, long), void>::call'


@pytest.mark.parametrize(("symbol", "name"), [
    (PYBIND_WAIT, "pybind11 binding of c10d::Work"),
    (BOXED_CALL, "c10::impl::BoxedKernelWrapper::call"),
    ("c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >)",
     "c10d::ProcessGroupGloo::AsyncWork::wait"),
    ("c10d::ops::(anonymous namespace)::barrierCPU", "c10d::ops::(anonymous namespace)::barrierCPU"),
    ("std::vector<int, std::allocator<int> >::operator[](unsigned long) const", "std::vector::operator[]"),
    ("at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&)::{lambda(char**, long)#1}::operator()",
     "at::native::(anonymous namespace)::add_kernel::{lambda}::operator()"),
    ("pthread_cond_wait", "pthread_cond_wait"),
    ("0x7f14ba24524a", "0x7f14ba24524a"),
])
def test_a_demangled_symbol_reads_as_its_qualified_function_name(symbol, name):
    # GIVEN a C++ symbol as py-spy demangles it WHEN it is shortened THEN the function's name is left
    assert symbol_name(symbol) == name


def test_only_native_frames_are_shortened():
    # GIVEN a native frame with a long signature and a Python frame whose name has angle brackets
    native = Frame(PYBIND_WAIT, "/x/libtorch_python.so", "libtorch_python.so", 0, native=True)
    python = Frame("<module>", "/job/train.py", "train.py", 8)
    # THEN the native frame's label is short, the Python one is as py-spy printed it
    assert native.label == "pybind11 binding of c10d::Work (libtorch_python.so:0)"
    assert python.label == "<module> (train.py:8)"


@pytest.mark.parametrize("fmt", [OutputFormat.text, OutputFormat.markdown, OutputFormat.json, OutputFormat.html])
def test_no_format_prints_a_cpp_signature_where_a_frame_belongs(fmt, capsys):
    # GIVEN the real CUDA job read with --native, whose ranks' stacks hold pybind11's dispatcher lambda

    bundle = load_bundle(GOLDEN / "gpu-gloo-cuda" / "bundle.json")
    assert any(f.name == PYBIND_WAIT[:len(f.name)] and len(f.name) > 1000
               for s in bundle.samples for p in s.processes if p.stack for t in p.stack.threads for f in t.frames)
    # WHEN the report is written in this format
    out = io.StringIO()
    render_report(judge(bundle).report, fmt, out)
    text = out.getvalue()
    # THEN no template soup is printed; where the format shows that frame, it reads as the binding it is
    assert "pybind11 binding of c10d::Work" in text or fmt is OutputFormat.text
    assert "cpp_function::initialize<" not in text and "call_guard<" not in text


def test_a_rank_read_natively_is_placed_at_its_first_named_frame():
    # GIVEN rank 1 of a real job deadlocked on a threading.Lock, read with --native: its innermost
    # frames are libc addresses py-spy could not name
    from hangdoc.analyze.classify import classify_rank
    from hangdoc.model import IoCounters, ProcSample, ProcStat, RankState, Stack, Thread

    from tests.factories import frame

    def libc(name):
        return frame(name, "/usr/lib/x86_64-linux-gnu/libc.so.6", native=True)

    frames = (libc("0x7ff22e8a3f16"), libc("0x7ff22e8aed90"),
              Frame("PyThread_acquire_lock_timed", "/x/libpython3.11.so.1.0", "libpython3.11.so.1.0", 0, native=True),
              Frame("<module>", "/job/hang_on_lock.py", "hang_on_lock.py", 8))
    proc = ProcStat(state="S", wchan=None, syscall=None, utime_s=1.0, stime_s=0.5, rss_bytes=1 << 20, num_threads=3,
                    io=IoCounters(1, 2, 3, 4, 5, 6))
    sample = ProcSample(pid=11, alive=True, proc=proc, stack=Stack(threads=(
        Thread(tid=11, name="MainThread", active=False, owns_gil=False, frames=frames),), native=True))
    # WHEN it is classified THEN it idles at the lock call, not at an address
    reading = classify_rank(sample)
    assert (reading.state, reading.detail) == (RankState.IDLE, "PyThread_acquire_lock_timed")
    assert reading.frame.label == "PyThread_acquire_lock_timed (libpython3.11.so.1.0:0)"
