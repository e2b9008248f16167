"""The job's own source read beside its stacks: a function's outline (loops, branches, try blocks,
handlers, jumps), the text of the lines the ranks stand at, bounded, redacted, never blocking."""
from __future__ import annotations

import os
import textwrap

from hangdoc.collect import sources
from hangdoc.collect.loopmark import frame_mark
from hangdoc.collect.sources import outline_source, read_sources

TRAIN = textwrap.dedent('''\
    import torch.distributed as dist

    def train(loader, rank):
        for epoch in range(10):
            for step, batch in enumerate(loader):
                loss = step_of(batch)
                try:
                    recall = metrics(batch)
                    dist.all_gather_object([None] * 2, recall)
                except Exception:
                    continue
                if rank == 0:
                    dist.barrier()
                else:
                    pass
            if early_stop(epoch):
                break
        dist.barrier()
    ''')


def test_an_outline_names_the_loops_branches_handlers_and_jumps_around_a_line():
    # GIVEN a training function WHEN it is outlined around the gather's line
    fn = outline_source(TRAIN, "/job/train.py", "train", [9])
    # THEN the gather sits in two loops and a try, and the try's handler swallows with continue
    assert fn is not None and fn.name == "train" and (fn.line, fn.end) == (3, 18)
    assert [(b.kind, b.line) for b in fn.around(9)] == [("for", 4), ("for", 5), ("try", 7)]
    kinds = {(b.kind, b.line, b.text) for b in fn.blocks}
    assert ("except", 10, "except Exception:") in kinds and ("continue", 11, "continue") in kinds
    assert ("if", 12, "if rank == 0:") in kinds and ("else", 15, "else:") in kinds
    assert ("break", 17, "break") in kinds
    # AND the line itself is kept as written
    assert fn.text_of(9) == "dist.all_gather_object([None] * 2, recall)"
    # AND a line after the loops is in no loop
    assert [b.kind for b in outline_source(TRAIN, "/job/train.py", "train", [18]).around(18)] == []


def test_module_level_code_is_outlined_as_the_module():
    # GIVEN a loop at module level WHEN outlined
    fn = outline_source("for i in range(3):\n    if i:\n        print(i)\n", "/job/run.py", "<module>", [3])
    # THEN the module's own statements make the outline
    assert [(b.kind, b.line) for b in fn.around(3)] == [("for", 1), ("if", 2)]


def test_a_secret_on_a_line_is_redacted_and_a_long_line_is_cut():
    # GIVEN a line holding a token and a very long line
    code = 'def f():\n    key = "hf_' + "A" * 34 + '"\n    x = ' + "1 + " * 200 + "1\n"
    fn = outline_source(code, "/job/f.py", "f", [2, 3])
    # THEN neither leaves in full
    assert "A" * 34 not in fn.text_of(2)
    assert len(fn.text_of(3)) <= sources.MAX_TEXT


def test_a_fifo_named_like_a_script_is_never_opened(tmp_path, monkeypatch):
    # GIVEN a "script" that is a FIFO (opening it for reading would block until a writer comes)
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    # WHEN hangdoc reads the source behind a frame in it
    found = sources._parsed(str(fifo), 1, tmp_path / "no-proc")
    # THEN it returns at once with nothing
    assert found is None


def test_a_file_over_the_bound_is_not_read(tmp_path, monkeypatch):
    # GIVEN a source file larger than the bound
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 10)
    monkeypatch.setattr(sources, "MAX_FILE_BYTES", 20)
    # WHEN read THEN it is left alone
    found = sources._parsed(str(big), 1, tmp_path / "no-proc")
    assert found is not None and found[1] is None


def test_a_frame_shows_its_flags_floats_and_the_exception_it_holds_but_never_a_string():
    # GIVEN py-spy's locals of a handler frame
    mark = frame_mark({"name": "main", "line": 71, "locals": [
        {"name": "early_stop", "repr": "True", "addr": 1},
        {"name": "e", "repr": "<UnicodeDecodeError at 0x7fafdde62340>", "addr": 2},
        {"name": "token", "repr": '"hunter2"', "addr": 3},
        {"name": "val_loss", "repr": "0.91", "addr": 4},
        {"name": "step", "repr": "61"},
    ]})
    # THEN the values that may differ between ranks are kept, and no string's repr
    assert mark.values == (("early_stop", "True"), ("e", "UnicodeDecodeError"), ("val_loss", "0.91"))
    assert mark.counters == (("step", 61),)
    assert "hunter2" not in repr(mark)


def _pointed_at(path):
    """The barrier-mismatch golden with its ranks' own frames pointed at `path` (line 3, in `train`)."""
    import dataclasses
    from pathlib import Path

    from hangdoc.bundle.files import load_bundle

    bundle = load_bundle(Path(__file__).resolve().parents[1] / "golden" / "barrier-mismatch" / "bundle.json")
    last = bundle.samples[-1]

    def repoint(sample):
        if sample.stack is None:
            return sample
        threads = tuple(dataclasses.replace(t, frames=tuple(
            dataclasses.replace(f, filename=str(path), name="train", line=3) if f.is_job_code else f
            for f in t.frames)) for t in sample.stack.threads)
        return dataclasses.replace(sample, stack=dataclasses.replace(sample.stack, threads=threads))

    return bundle.job, (dataclasses.replace(last, processes=tuple(repoint(s) for s in last.processes)),)


def test_a_watch_outlines_a_function_once_and_again_when_its_file_changes(tmp_path):
    # GIVEN ranks standing in a script's function, read round after round
    script = tmp_path / "train.py"
    script.write_text("def train():\n    for i in range(3):\n        step(i)\n")
    job, samples = _pointed_at(script)
    first = read_sources(job, samples, tmp_path / "no-proc")
    # WHEN the same round is read again THEN the outline made before is served, not made again
    assert read_sources(job, samples, tmp_path / "no-proc")[0] is first[0]
    # WHEN the script is edited THEN its new line is read
    script.write_text("def train():\n    while True:\n        step_again()\n")
    os.utime(script, ns=(1, 1))
    again = read_sources(job, samples, tmp_path / "no-proc")
    assert again[0].text_of(3) == "step_again()" and [b.kind for b in again[0].around(3)] == ["while"]
