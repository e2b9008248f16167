"""The fallback engine: pystack's threads become the same model py-spy's JSON does."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from hangdoc.collect import pystack_engine
from hangdoc.collect.pystack_engine import _thread
from hangdoc.collect.stacks import PySpy, parse_dump
from hangdoc.base.errors import PySpyMissing, PyStackMissing
from hangdoc.live.probes import engine_name, stack_engine


@dataclass
class Location:
    lineno: int


@dataclass
class Code:
    filename: str
    scope: str
    location: Location


@dataclass
class PyFrame:   # pystack.types.PyFrame's fields that the engine reads
    code: Code
    arguments: dict = field(default_factory=dict)
    locals: dict = field(default_factory=dict)


@dataclass
class PyThread:
    tid: int
    frames: list
    holds_the_gil: int = 0
    name: str | None = None


def frame(scope: str, path: str, line: int, **values: str) -> PyFrame:
    return PyFrame(Code(path, scope, Location(line)), locals=values)


def main_thread(step: str, batch_at: str) -> PyThread:
    # pystack lists frames outermost first
    return PyThread(4242, [frame("<module>", "/work/train.py", 90),
                           frame("train", "/work/train.py", 40, step=step, batch=f"<Tensor at {batch_at}>",
                                 name='"run-1"'),
                           frame("all_reduce", "/opt/venv/lib/python3.11/site-packages/torch/distributed/"
                                 "distributed_c10d.py", 2806)], holds_the_gil=1)


def test_main_thread_frames_come_innermost_first_with_the_loop_mark():
    # GIVEN pystack's view of a rank in all_reduce under its training loop, locals read
    data = [_thread(main_thread("17", "0x7f00aa"), pid=4242), _thread(PyThread(4243, []), pid=4242)]
    # WHEN it goes through the parser py-spy's JSON goes through
    dump = parse_dump(data, loop_locals=True)
    # THEN the main thread is named, innermost frame first, and the step counter is read by value
    main = dump.stack.main
    assert main.name == "MainThread" and main.owns_gil
    assert [f.name for f in main.frames] == ["all_reduce", "train", "<module>"]
    train = next(m for m in main.loop.frames if m.function == "train")
    assert dict(train.counters) == {"step": 17}


def test_a_new_batch_object_changes_the_digest_and_nothing_of_its_value_is_kept():
    # GIVEN two reads of the same loop line: the batch rebound, then the same objects again
    def mark(step, at):
        return parse_dump([_thread(main_thread(step, at), 4242)], loop_locals=True).stack.main.loop
    first, rebound, same = mark("17", "0x7f00aa"), mark("17", "0x7f00bb"), mark("17", "0x7f00aa")
    # THEN the digest tells the rebound batch, and stays for the same objects
    assert first != rebound and first == same
    assert "run-1" not in repr(first)


def test_worker_index_is_read_from_worker_loop_locals():
    # GIVEN a DataLoader worker as pystack prints it
    worker = PyThread(77, [frame("_bootstrap", "/usr/lib/python3.11/multiprocessing/process.py", 314),
                           frame("_worker_loop", "/opt/venv/lib/python3.11/site-packages/torch/utils/data/"
                                 "_utils/worker.py", 349, worker_id="3", num_workers="8")])
    # WHEN parsed with worker locals
    dump = parse_dump([_thread(worker, 77)])
    # THEN its index and the pool's size are known
    assert (dump.worker_id, dump.num_workers) == (3, 8)


def test_auto_takes_py_spy_when_installed_and_pystack_when_asked(monkeypatch):
    # GIVEN this environment (py-spy installed with hangdoc)
    # WHEN the engine is chosen
    auto = stack_engine("auto")
    # THEN py-spy is the default, and asking for pystack without it installed teaches the fix
    assert isinstance(auto, PySpy) and engine_name(auto) == "py-spy"
    monkeypatch.setattr(pystack_engine, "available", lambda: False)
    with pytest.raises(PyStackMissing, match="pip install pystack"):
        stack_engine("pystack")


def test_auto_falls_back_to_pystack_where_py_spy_is_missing(monkeypatch):
    # GIVEN no py-spy anywhere, pystack importable
    import hangdoc.live.probes as pipeline

    def missing(explicit=None):
        raise PySpyMissing()

    monkeypatch.setattr(pipeline, "find_py_spy", missing)
    monkeypatch.setattr(pystack_engine, "available", lambda: True)
    # WHEN the engine is chosen automatically
    engine = stack_engine("auto")
    # THEN pystack reads the stacks, one dump at a time, and the bundle will say so
    assert engine_name(engine) == "pystack" and engine.parallel == 1


def test_a_nonblocking_read_that_meets_moving_memory_is_read_again_stopped(monkeypatch):
    engine_mod = pytest.importorskip("pystack.engine")
    from pystack.errors import EngineError

    # GIVEN pystack failing on a running process ("Invalid address in remote process"), not on a stopped one
    calls = []

    def get_process_threads(pid, stop_process=True, locals=False, **_):
        calls.append(stop_process)
        if not stop_process:
            raise EngineError("Invalid address in remote process")
        return [main_thread("3", "0x7f00aa")]

    monkeypatch.setattr(engine_mod, "get_process_threads", get_process_threads)
    # WHEN a rank is read non-blocking
    dump = pystack_engine.PyStack().dump(4242, nonblocking=True, loop_locals=True)
    # THEN it was read again, stopped, and the stack is there
    assert calls == [False, True]
    assert dump.stack.main.frames[0].name == "all_reduce"


@pytest.mark.parametrize("first", [[], [frame("select", "/usr/lib/python3.11/selectors.py", 415)]],
                         ids=["no frame", "innermost only"])
def test_a_read_that_stops_short_of_the_module_is_read_once_more(monkeypatch, first):
    engine_mod = pytest.importorskip("pystack.engine")

    # GIVEN pystack whose first read of a rank fails on part of its memory: no frame, or only the innermost
    calls = []

    def get_process_threads(pid, stop_process=True, locals=False, **_):
        calls.append(stop_process)
        return [PyThread(4242, first)] if len(calls) == 1 else [main_thread("3", "0x7f00aa")]

    monkeypatch.setattr(engine_mod, "get_process_threads", get_process_threads)
    # WHEN the rank is read
    dump = pystack_engine.PyStack().dump(4242, loop_locals=True)
    # THEN it was read once more, and the whole stack is kept, down to its <module>
    assert len(calls) == 2
    assert [f.name for f in dump.stack.main.frames] == ["all_reduce", "train", "<module>"]


def test_a_whole_read_is_read_once(monkeypatch):
    engine_mod = pytest.importorskip("pystack.engine")
    calls = []

    def get_process_threads(pid, stop_process=True, locals=False, **_):
        calls.append(stop_process)
        return [main_thread("3", "0x7f00aa")] if len(calls) == 1 else [PyThread(4242, [])]

    monkeypatch.setattr(engine_mod, "get_process_threads", get_process_threads)
    # GIVEN a read that reaches the rank's <module>; WHEN read; THEN once, and kept
    dump = pystack_engine.PyStack().dump(4242, loop_locals=True)
    assert len(calls) == 1 and dump.stack.main.frames[-1].name == "<module>"


def test_a_refused_attach_teaches_the_fix_like_py_spys(monkeypatch):
    engine_mod = pytest.importorskip("pystack.engine")

    # GIVEN ptrace refused to pystack
    def refused(pid, **_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(engine_mod, "get_process_threads", refused)
    # WHEN a process is read
    with pytest.raises(Exception) as caught:
        pystack_engine.PyStack().dump(4242)
    # THEN it is the "denied" failure that require_stacks turns into the ptrace advice
    assert getattr(caught.value, "kind", None) == "denied" and "ptrace refused" in str(caught.value)
