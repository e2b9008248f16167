"""The straggler of a job that waits the NCCL way, told by where the ranks stand, no GPU needed.

On NCCL the step's collectives return at once and each rank waits for them at its next sync line
(`.item()`), computing as far as its Python frames tell. The ranks that stand at that line most
wait for the one that hardly does. And a straggler's cause: the activity it spends more of the
common step on than the others, its workers' cores a second witness.
"""
from __future__ import annotations

import dataclasses

import pytest

from hangdoc.analyze.classify import WORK_WAIT, place
from hangdoc.analyze.progress import region, step_times
from hangdoc.analyze.timeline import LiveTimelines, timelines
from hangdoc.model import RankState, SlowKind
from hangdoc.report.judge import judge
from tests.unit.test_progress import SITE, TRAIN, dump, main_frame, pyframe
from tests.unit.test_witnesses import SHAPES, forward, in_dataloader, job_bundle, module, spin_line

SAMPLES = 40


def busy(step: int) -> list[dict]:
    """The job's compute at its own line (`busy_for(0.05 + extra)`: a tanh of matmuls, C frames only)."""
    return [pyframe("busy_for", TRAIN, 43, {"x": (0x71, "<Tensor>")}), main_frame(step, 0xB0 + step, 100), module(140)]


def spinning(step: int, which: str = "own") -> list[dict]:
    """At the sync line (either of its frames), the step counter at `step`."""
    frames = spin_line(which)
    frames[-2] = main_frame(step, 0xB0 + step, 110)
    return frames


def nccl_rows(ranks: int, straggler: int, probe_at: int | None = None) -> list:
    """Every rank steps at every sample; the others are caught at their sync line 4 samples in 5, the
    straggler at its compute 9 in 10."""
    rows = []
    for i in range(SAMPLES):
        row = []
        for r in range(ranks):
            at_sync = (i % 10 == 3) if r == straggler else (i % 5 != 0)
            frames = spinning(i, "genexpr" if (i + r) % 2 else "own") if at_sync else busy(i)
            row.append({"frames": frames, "cpu": 1.0 + 2 * i, "probe": at_sync and probe_at == i and r != straggler})
        rows.append(row)
    return rows


def test_three_ranks_two_standing_at_their_sync_line_name_the_third_slow():
    # GIVEN 3 ranks of the NCCL shape: ranks 0 and 2 stand at their sync line most samples, rank 1
    # computes at its own line (no GPU reading, no native read)
    report = judge(job_bundle(nccl_rows(3, straggler=1))).report
    # THEN slow, rank 1 the straggler, the others waiting at their sync line
    assert report.verdict == "slow" and report.culprit_ranks == (1,)
    assert report.slow.kind == SlowKind.STRAGGLER and report.slow.at.startswith("host_value (train.py:69)")
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    assert "stand at their sync line host_value" in finding.title


def test_two_ranks_each_at_a_line_of_its_own_name_no_straggler_without_a_witness_of_the_wait():
    # GIVEN 2 ranks: rank 0 at the sync line, rank 1 at its compute: symmetric (either line could be the wait)
    report = judge(job_bundle(nccl_rows(2, straggler=1))).report
    # THEN no straggler is named (a wrong culprit is worse than none)
    assert report.verdict == "healthy" and report.culprit_ranks == ()


def test_two_ranks_with_a_native_read_of_the_wait_name_the_straggler():
    # GIVEN the same, and one native read of rank 0 at its sync line that found it waiting on a collective
    rows = nccl_rows(2, straggler=1, probe_at=11)
    rows[11][0]["frames"] = [{"name": "c10d::Work::isCompleted", "filename": "libtorch_cpu.so",
                              "short_filename": "libtorch_cpu.so", "line": 0}] + rows[11][0]["frames"]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN rank 1 is the straggler, and the others' line is the one the native read explained
    assert report.verdict == "slow" and report.culprit_ranks == (1,)
    assert report.slow.at.startswith("host_value")


# How py-spy prints the generator expression's local on a real gloo job's spin line (`--locals`).
REAL_WORK = "<torch._C._distributed_c10d.Work at 0x7f1831c70af0>"


def test_two_ranks_whose_spin_line_holds_a_collectives_work_name_the_straggler():
    # GIVEN the symmetric 2-rank job, the generator expression's `w` read as py-spy prints a c10d
    # Work: the line's own locals say it waits on a collective (no GPU, no native read)
    rows = with_work(nccl_rows(2, straggler=1))
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN rank 1 is the straggler: rank 0 waits on the Work at its sync line most of each step
    assert report.verdict == "slow" and report.culprit_ranks == (1,), (report.verdict, report.culprit_ranks)
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    assert "a collective's Work" in " ".join([finding.title, *finding.evidence])


def data_straggler_rows() -> list:
    """2 ranks in a DDP step: rank 0 waits in the backward's all_reduce most samples; rank 1 splits its
    samples between waiting on its DataLoader and computing."""
    rows = []
    for i in range(SAMPLES):
        wait = [pyframe("_engine_run_backward", SITE + "torch/autograd/graph.py", 979, {}),
                main_frame(i, 0xB0 + i, 89), module(120)]
        loader = [*in_dataloader(28)[:-1], main_frame(i, 0xB0 + i, 84), module(120)]
        rows.append([{"frames": wait if i % 5 else busy(i), "cpu": 1.0 + i},
                     {"frames": loader if i % 2 else busy(i), "cpu": 1.0 + 2 * i}])
    return rows


def test_a_straggler_cause_is_the_activity_it_spends_more_of_the_step_on_than_the_others():
    # GIVEN rank 1 waiting on its data half its samples and computing the other half, rank 0 waiting
    # for it in the all_reduce most of its samples and computing a fifth
    report = judge(job_bundle(data_straggler_rows())).report
    # THEN slow, rank 1, and the cause is its data: 50 % of a step against the others' 0 %, while its
    # compute is 50 % against their 20 %; both figures are in the finding
    assert report.verdict == "slow" and report.culprit_ranks == (1,)
    assert report.slow.doing == "dataloader-wait"
    finding = next(f for f in report.findings if f.rule == "slow-rank")
    cause = next(e for e in finding.evidence if e.startswith("what keeps it:"))
    assert "waiting on its DataLoader 50% of a step (the others 0%)" in cause
    assert "its own compute 50% of a step (the others 20%)" in cause


def test_ranks_waiting_in_a_barrier_while_one_validates_are_a_pause_not_a_sync_line():
    # GIVEN 3 ranks: rank 0 validating (computing at its own line), ranks 1 and 2 in a barrier in
    # torch's frames most samples (the zoo's validation-pause, one rank more)
    barrier = [pyframe("barrier", SITE + "torch/distributed/distributed_c10d.py", 5356, {}),
               pyframe("_exception_logger.<locals>.wrapper", SITE + "torch/distributed/c10d_logger.py", 83, {})]
    rows = [[{"frames": busy(i), "cpu": 1.0 + 2 * i}]
            + [{"frames": barrier + busy(i)[1:] if i % 5 else busy(i), "cpu": 1.0 + i}] * 2 for i in range(SAMPLES)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN no straggler: a barrier is a pause of torch's, not a sync line of the job's own
    assert report.verdict == "healthy" and report.slow is None


def evaluating(step: int, batch_idx: int) -> list[dict]:
    """Rank 0 in its evaluation, called from the training loop every N steps: its own loop's counter
    moves (`batch_idx`), the training step's stands."""
    return [pyframe("busy_for", TRAIN, 43, {"x": (0x71, "<Tensor>")}),
            pyframe("evaluate", TRAIN, 80, {"batch_idx": (0x80, str(batch_idx)), "batches": (0x81, "32")}),
            main_frame(step, 0xB0 + step, 118), module(140)]


def eval_pause_rows(probe_at: int | None = 9) -> list:
    """2 ranks of the NCCL shape (the zoo's spin-eval-pause): for 2 samples in 6 both step (a few steps
    each interval, each caught computing or at its sync line); for the other 4, rank 0 evaluates while
    rank 1 spins at its sync line, its step standing; one native read of rank 1 there finds it
    waiting on the collective."""
    rows = []
    for i in range(SAMPLES + 8):
        k = i % 6
        step = (i // 6) * 15 + min(k, 2) * 7
        if k < 2:
            row = [{"frames": busy(step) if (i + r) % 2 else spinning(step, "genexpr"), "cpu": 1.0 + 2 * i}
                   for r in range(2)]
        else:
            rank1 = spinning(step, "genexpr" if i % 2 else "own")
            if i == probe_at:
                rank1 = [{"name": "c10d::Work::isCompleted", "filename": "libtorch_cpu.so",
                          "short_filename": "libtorch_cpu.so", "line": 0}] + rank1
            row = [{"frames": evaluating(step, 8 * (k - 1)), "cpu": 1.0 + 2 * i},
                   {"frames": rank1, "cpu": 1.0 + 2 * i, "probe": i == probe_at}]
        rows.append(row)
    return rows


def with_work(rows: list) -> list:
    """The generator expression's `w` read as py-spy prints a c10d Work on a real gloo job."""
    for row in rows:
        for cell in row:
            for frame in cell["frames"]:
                for local in frame.get("locals") or ():
                    if local["name"] == "w":
                        local["repr"] = REAL_WORK
    return rows


@pytest.mark.parametrize("told_by", ["native read", "Work local"])
def test_a_rank_that_pauses_every_n_steps_while_the_others_wait_at_their_sync_line_is_no_straggler(told_by):
    # GIVEN the eval pause: rank 1 stands at its sync line (a native read, or the Work its line holds,
    # tells it waits there) for most of its samples, but all of them in stretches without a step far
    # longer than its steady steps; between the pauses both ranks step alike
    rows = eval_pause_rows() if told_by == "native read" else with_work(eval_pause_rows(probe_at=None))
    report = judge(job_bundle(rows)).report
    # THEN a pause is not a straggler: nothing is slow, no rank is named
    assert report.verdict == "healthy" and report.slow is None and report.culprit_ranks == (), \
        (report.verdict, report.culprit_ranks)


def module_spin(i: int) -> list[dict]:
    """A module-level spin on the step's Works, `while not all(w.is_completed() for w in pending): pass`:
    a sample catches the module's own line or the generator expression on it, whose locals are new
    objects at every turn of the spin (a new iterator, the next Work of the list). py-spy shows the
    generator expression alone, no `<module>` frame below it (seen on a real gloo job)."""
    if i % 3 == 0:
        return [pyframe("<module>", TRAIN, 35, {})]
    return [pyframe("<genexpr>", TRAIN, 35, {".0": (0x6300 + 8 * i, "<list_iterator>"), "w": (0x6400 + 8 * i, REAL_WORK)})]


def test_a_generator_expression_alone_on_the_stack_is_its_modules_line():
    # GIVEN the two samples of a module-level spin line py-spy gives: the module's own frame, and the
    # generator expression with nothing below it
    own, genexpr = dump(module_spin(0)).main.frames, dump(module_spin(1)).main.frames
    # THEN they are one place and one region (the line of the module's code)
    assert place(own) == place(genexpr) and region(own) == region(genexpr)
    assert place(genexpr)[0].label == "<module> (train.py:35)"


def test_a_module_level_job_spinning_on_its_works_between_steps_goes_round():
    # GIVEN the same spin between steps of a healthy module-level job: each sample finds a rank at its
    # forward or spinning on the step's Works, its sockets moving the gradients
    rows = [[{"frames": module_spin(i) if (i + r) % 2 else forward(30), "cpu": 1.0 + 2 * i, "io": 1000 + 90_000 * i}
             for r in range(2)] for i in range(45)]
    # WHEN judged
    report = judge(job_bundle(rows)).report
    # THEN healthy past the default threshold: leaving the spin for the forward is going round the loop
    assert report.verdict == "healthy" and report.threshold.steps_seen > 20, \
        (report.verdict, report.threshold.steps_seen)


def test_a_rank_found_spinning_on_its_works_twice_stepped_where_its_collectives_moved_bytes():
    # GIVEN a module-level rank found spinning on the step's Works at every sample (it never sleeps),
    # its sockets moving the gradients in between; and the same rank with its sockets quiet
    def spinner(io_per_sample: int):
        rows = [[{"frames": module_spin(2 * i + 1), "cpu": 1.0 + 2 * i, "io": 1000 + io_per_sample * i}]
                for i in range(20)]
        return timelines(job_bundle(rows))[100]
    # WHEN its steps are read
    # THEN it stepped between every two samples where its collectives moved bytes, and never where not
    assert len(step_times(spinner(90_000))) == 19
    assert step_times(spinner(0)) == []


def test_a_frame_that_holds_a_work_while_it_runs_the_forward_computes():
    # GIVEN a loop that all-reduces its gradients asynchronously and runs on while they travel (overlap
    # as intended): its frame holds the Work, and a sample finds it in the model's forward; and the same
    # frame found at its own line, spinning on the Work
    holder = pyframe("main", TRAIN, 120, {"step": (0x10, "7"), "work": (0x6400, REAL_WORK)})
    forward_run = [pyframe("Linear.forward", SITE + "torch/nn/modules/linear.py", 125, {"input": (0x51, "<T>")}),
                   pyframe("Module._call_impl", SITE + "torch/nn/modules/module.py", 1786, {}), holder, module(140)]
    rows = [[{"frames": forward_run, "cpu": 1.0}], [{"frames": [holder, module(140)], "cpu": 3.0}]]
    # WHEN read
    line = timelines(job_bundle(rows))[100]
    # THEN computing in the forward, waiting on the Work at its line
    assert [p.reading.state for p in line.points] == [RankState.COMPUTE, RankState.COLLECTIVE]


def test_a_spin_lines_samples_before_its_work_showed_are_the_same_wait():
    # GIVEN a rank spinning on the step's Works at module level from hangdoc's first sample, the first
    # sample catching the line's own frame (no Work in sight), the next its generator expression
    rows = [[{"frames": module_spin(3 * i + (0 if i == 0 else 1)), "cpu": 1.0 + 2 * i}] for i in range(8)]
    bundle = job_bundle(rows)
    # WHEN read at once, and by a watch round by round
    whole = timelines(bundle)[100]
    live = LiveTimelines()
    for n in range(1, len(rows) + 1):
        rounds = live.of(dataclasses.replace(bundle, samples=bundle.samples[:n]))[100]
    # THEN every sample is the wait, the first too: a wait under way since hangdoc's first sample
    assert [p.reading.detail for p in whole.points] == [WORK_WAIT] * 8
    assert [p.reading for p in rounds.points] == [p.reading for p in whole.points]
    assert rounds.state_since() == whole.state_since() == whole.points[0].time


def test_a_spin_lines_lone_generator_expressions_caught_before_its_own_frame_are_the_same_place_and_wait():
    # GIVEN a rank spinning on the step's Works in main() from hangdoc's first sample, the first
    # samples catching only the generator expression py-spy shows alone (its callers not shown, the
    # Work in its locals), the line's own frame (no Work in sight) caught only later
    order = [1, 2, 4, 5, 0, 3, 6]
    rows = [[{"frames": function_spin(i), "cpu": 1.0 + 2 * n}] for n, i in enumerate(order)]
    bundle = job_bundle(rows)
    # WHEN read at once, and by a watch round by round
    whole = timelines(bundle)[100]
    live = LiveTimelines()
    for n in range(1, len(rows) + 1):
        rounds = live.of(dataclasses.replace(bundle, samples=bundle.samples[:n]))[100]
    # THEN one place and one wait from the first sample: no step between the line's two shapes
    assert len({place(p.sig) for p in whole.points}) == 1, [place(p.sig) for p in whole.points]
    assert [p.reading.state for p in whole.points] == [RankState.COLLECTIVE] * len(order)
    assert [p.reading for p in rounds.points] == [p.reading for p in whole.points]
    assert rounds.state_since() == whole.state_since() == whole.points[0].time
    assert step_times(whole) == []


def test_a_wait_a_native_probe_named_keeps_its_name_when_the_work_shows_and_after_a_round_without_a_stack():
    # GIVEN a rank spinning on the step's Works in main(), probed natively at the first sample (c10d's
    # Work under the line), its later samples catching the line's own frame or its generator expression
    # with the Work in its locals, and one round whose stack py-spy could not read
    native = [pyframe("c10d::Work::isCompleted", "libtorch_cpu.so", 0, {})]
    rows = [[{"frames": native + function_spin(0), "cpu": 1.0, "probe": True}]]
    rows += [[{"frames": function_spin(i), "cpu": 1.0 + 2 * i}] for i in range(1, 9)]
    bundle = job_bundle(rows)
    unread = bundle.samples[4]
    bundle = dataclasses.replace(bundle, samples=(
        *bundle.samples[:4], dataclasses.replace(unread, processes=(dataclasses.replace(unread.processes[0], stack=None),)),
        *bundle.samples[5:]))
    # WHEN read
    line = timelines(bundle)[100]
    # THEN one wait under one name from the first sample (a new name would read as a new wait)
    assert len({(p.reading.state, p.reading.detail) for p in line.points}) == 1, [p.reading for p in line.points]
    assert line.points[0].reading.state == RankState.COLLECTIVE
    assert line.state_since() == line.points[0].time


def function_spin(i: int) -> list[dict]:
    """The same spin in `main()`: py-spy shows the generator expression alone here too, by its qualified
    name, none of its callers below it (seen on a real gloo job); the line's own frame with them."""
    if i % 3 == 0:
        return [pyframe("main", TRAIN, 50, {"state": (0x12, "<TrainState>"), "pending": (0x13, "[...]")}), module(68)]
    return [pyframe("main.<locals>.<genexpr>", TRAIN, 50, {".0": (0x6300 + 8 * i, "<list_iterator>"),
                                                            "w": (0x6400 + 8 * i, REAL_WORK)})]


@pytest.mark.parametrize("spin", [module_spin, function_spin], ids=["module level", "in main()"])
def test_a_spin_on_a_collectives_work_is_no_step_whichever_shape_a_sample_caught(spin):
    # GIVEN a job that went round its loop, then stalled: rank 1 waits on its DataLoader (asleep), rank 0
    # spins on the step's Works at its own line (burning a core, no bytes moved), its samples falling on
    # the line's own frame or on the generator expression py-spy shows alone, whose locals are new
    # objects at every sample
    went = [[{"frames": SHAPES[(i + r) % 3](), "cpu": 1.0 + i} for r in range(2)] for i in range(10)]
    stalled = [[{"frames": spin(i), "cpu": 11.0 + 2 * i}, {"frames": in_dataloader(28), "cpu": 11.0}]
               for i in range(30)]
    # WHEN judged
    report = judge(job_bundle(went + stalled)).report
    # THEN a hang, rank 1 the culprit, quiet from the stall: the spin's turning locals are not steps (a
    # wait in the step's collectives whose innermost frame takes a new object is one), and the line's two
    # shapes are one place, so going from one to the other is not going round the loop
    assert report.verdict == "hang" and report.culprit_ranks == (1,), (report.verdict, report.culprit_ranks)
    assert report.threshold.quiet_s >= 55, report.threshold.quiet_s


@pytest.mark.parametrize("first_read", [True, False], ids=["first stack read", "first stack unreadable"])
def test_a_watch_attached_after_an_nccl_shaped_stall_dates_it_whether_or_not_the_first_stack_was_read(first_read):
    # GIVEN a watch attached 14 s into a stall: rank 0 spins on its step's Works at its own line
    # (on the CPU, so the kernel dates nothing of it), rank 1 waits on its DataLoader, its main
    # thread off the CPU for 14 s at the first sample; and (the second case) py-spy could not read
    # rank 0's stack at the first sample ("Failed to get local variables: Bad address")
    rows = [[{"frames": function_spin(i), "cpu": 11.0 + 2 * i}, {"frames": in_dataloader(28), "cpu": 11.0}]
            for i in range(4)]
    bundle = job_bundle(rows)
    off = lambda s, seconds: dataclasses.replace(s, proc=dataclasses.replace(
        s.proc, main_thread=dataclasses.replace(s.proc.main_thread, off_cpu_s=seconds)))
    first = bundle.samples[0]
    spinner, sleeper = first.processes
    spinner = off(spinner, 0.0) if first_read else dataclasses.replace(off(spinner, 0.0), stack=None)
    later = [dataclasses.replace(s, processes=(off(s.processes[0], 0.0), s.processes[1])) for s in bundle.samples[1:]]
    samples = (dataclasses.replace(first, processes=(spinner, off(sleeper, 14.0))), *later)
    # WHEN judged at the fourth sample, 6 s after the first
    report = judge(dataclasses.replace(bundle, samples=samples)).report
    # THEN a hang of rank 1 from the past: the wait dated by rank 1, which it needs, asleep since
    # 14 s before the first sample (not the 60 s default, not hangdoc's first read of rank 0)
    assert (report.verdict, report.culprit_ranks) == ("hang", (1,)), (report.verdict, report.threshold)
    assert report.before is not None and report.before.told_by == "peers" and report.before.waited_s == 14.0
