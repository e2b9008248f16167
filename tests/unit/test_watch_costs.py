"""What a watch round asks of the same evidence again is answered without reading it all again."""
from __future__ import annotations

from factories import node_bundle
from hangdoc.analyze.logs import killed_workers
from hangdoc.model.logline import killed_in_line
from hangdoc.model import LogTail
from hangdoc.rules.logs import find_lines

T0 = 1_700_000_000.0


def test_a_line_tells_which_workers_died_and_how():
    # GIVEN the two lines PyTorch prints for a dead worker, and an ordinary line
    killed = "[rank1]: RuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error. "
    exited = "RuntimeError: DataLoader worker (pid(s) 11, 12) exited unexpectedly"
    # WHEN each is read alone and in a tail
    # THEN the killed one names its signal, the exited one each pid, the ordinary one nothing
    assert killed_in_line(killed) == ((4242, "Bus error", True),)
    assert killed_in_line(exited) == ((11, "exited unexpectedly", False), (12, "exited unexpectedly", False))
    assert killed_in_line("step 40 loss 0.3") == ()
    assert killed_workers((LogTail("job.log", (exited, killed, "(pid 5) is killed by signal: X")),)) == {
        11: "exited unexpectedly", 12: "exited unexpectedly", 4242: "Bus error"}


def test_lines_are_found_in_the_tails_that_hold_them_and_in_no_other():
    # GIVEN two tails, one holding a needle at its third line
    quiet = LogTail("a.log", tuple(f"step {i}" for i in range(300)))
    loud = LogTail("b.log", ("step 1", "step 2", "ERROR: No space left on device", "step 3"))
    # WHEN the needle (and one no line holds) is looked for
    found = find_lines((quiet, loud), "No space left", "never printed")
    # THEN the one line is found, by its tail and index, and a needle split across lines is not
    assert found == [(loud, 2)]
    assert find_lines((loud,), "step 2\nERROR") == []


def test_the_analysis_reads_worker_fates_from_its_own_timelines(monkeypatch):
    # GIVEN a node's bundle and a watch's live timelines
    from hangdoc.analyze import workers
    from hangdoc.analyze.assess import analyse
    from hangdoc.analyze.timeline import LiveTimelines

    bundle = node_bundle(0, 2, 1, T0, workers=2, samples=4)
    live = LiveTimelines()

    def rebuilt(_bundle):
        raise AssertionError("the timelines were built again over the whole history")

    monkeypatch.setattr(workers, "timelines", rebuilt)
    # WHEN the round is analysed
    analysis = analyse(bundle, live=live)
    # THEN every rank's workers are laid out, and no timeline was built again
    assert [len(r.workers) for r in analysis.ranks] and all(r.workers for r in analysis.ranks)
