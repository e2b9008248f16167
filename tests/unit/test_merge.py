"""Merging the bundles of a job's nodes: what belongs together, how samples align, what the report says."""
from __future__ import annotations

import dataclasses
import io

import pytest

from hangdoc.analyze.classes import stack_tree
from hangdoc.report import judge
from hangdoc.analyze.timeline import timelines
from factories import node_bundle
from hangdoc.bundle.files import bundle_from_json
from hangdoc.base.errors import EXIT_USAGE, HangdocError
from hangdoc.bundle.merge import merge_bundles
from hangdoc.model import BUNDLE_SCHEMA, Role
from hangdoc.render.markdown import report_markdown
from hangdoc.render.text import render_text
from hangdoc.base.serde import to_dict

T0 = 1_700_000_000.0


def job_of(nodes: int, culprit: int, *, ranks_per_node: int = 8, workers: int = 2, **kw):
    """The bundles of every node of a job of `nodes` x `ranks_per_node` ranks, rank `culprit` waiting on data."""
    return [node_bundle(n, nodes, culprit, T0, ranks_per_node=ranks_per_node, workers=workers, **kw)
            for n in range(nodes)]


def names(n: int) -> list[str]:
    return [f"node{i}.json" for i in range(n)]


def text_of(report, bundle) -> str:
    out = io.StringIO()
    render_text(report, out, width=200)
    return out.getvalue()


def test_two_nodes_merged_name_the_culprit_with_its_node_and_host():
    # GIVEN two nodes of 8 ranks; rank 9, on node 1, waits on its DataLoader, the rest in all_reduce
    bundles = job_of(2, culprit=9)
    # WHEN merged and diagnosed
    merged = merge_bundles(bundles, names(2))
    report = judge(merged).report
    # THEN the culprit is rank 9, on node 1's host, with its own pid on that node
    assert report.verdict == "hang" and report.culprit_ranks == (9,)
    rank9 = next(r for r in report.ranks if r.rank == 9)
    assert (rank9.host, rank9.group_rank, rank9.state) == ("node0001", 1, "dataloader-wait")
    assert rank9.pid == 100 + 1 * 3 and {w.state for w in rank9.workers} == {"decompressing"}
    assert {r.host for r in report.ranks if r.rank < 8} == {"node0000"}
    straggler = [f for f in report.findings if f.rule == "collective-straggler"]
    assert straggler and straggler[0].ranks == (9,)
    assert "rank 9 (pid 103): dataloader-wait" in "\n".join(straggler[0].evidence)
    # and the text report says where the culprit runs
    assert "  rank 9 runs on node 1, host node0001, pid 103\n" in text_of(report, merged)


def test_pids_alike_on_every_node_are_kept_apart_and_shown_as_they_are():
    # GIVEN nodes whose processes have the same pids (containers)
    bundles = job_of(3, culprit=17)
    # WHEN merged
    merged = merge_bundles(bundles, names(3))
    # THEN every process has a key of its own, and the report shows each rank's pid on its node
    pids = [p.pid for p in merged.job.processes]
    assert len(pids) == len(set(pids)) == 3 * (1 + 8 * 3)
    assert sorted({p.node_pid for p in merged.job.processes}) == sorted({p.pid for p in bundles[0].job.processes})
    report = judge(merged).report
    assert {r.pid for r in report.ranks if r.rank in (1, 9, 17)} == {103}


def test_pids_that_do_not_collide_are_not_renumbered():
    # GIVEN two nodes with pids of their own
    bundles = [node_bundle(n, 2, 9, T0, workers=2, pid_base=100 + 1000 * n) for n in range(2)]
    # WHEN merged
    merged = merge_bundles(bundles, names(2))
    # THEN the pids are the nodes' own
    assert {p.pid for p in merged.job.processes} == {p.pid for b in bundles for p in b.job.processes}


def test_every_process_carries_its_nodes_host():
    # GIVEN two nodes WHEN merged THEN each process names the host it runs on
    merged = merge_bundles(job_of(2, culprit=9), names(2))
    hosts = {(p.group_rank, p.host) for p in merged.job.processes if p.role is not Role.LAUNCHER}
    assert hosts == {(0, "node0000"), (1, "node0001")}


def test_samples_pair_by_time_and_each_is_used_once():
    # GIVEN node 0 sampled 6 times a second apart, node 1 3 times 2 s apart, clocks 0-0.5 s out of phase
    fast = node_bundle(0, 2, 9, T0, workers=1, samples=6, interval_s=1.0)
    slow = node_bundle(1, 2, 9, T0, workers=1, samples=3, interval_s=2.0)
    # WHEN merged
    merged = merge_bundles([fast, slow], names(2))
    # THEN the times only grow, no node appears twice in one snapshot, and every node sample is used once
    times = [s.time for s in merged.samples]
    assert times == sorted(times)
    lines = timelines(merged)
    for bundle in (fast, slow):
        rank = bundle.job.ranks[0]
        merged_pid = next(p.pid for p in merged.job.processes if p.rank == rank.rank and p.role is Role.RANK)
        assert len(lines[merged_pid].points) == len(bundle.samples)
    # and the last snapshot holds every process of both nodes
    assert len(merged.last.processes) == len(fast.last.processes) + len(slow.last.processes)


def test_a_node_captured_later_joins_the_last_snapshot():
    # GIVEN node 0 watched for 4 s (it saw the stall) and node 1 captured once, 10 s later
    watched = node_bundle(0, 2, 9, T0, workers=1, samples=5, interval_s=1.0)
    once = node_bundle(1, 2, 9, T0 + 10, workers=1, samples=1)
    # WHEN merged and diagnosed
    merged = merge_bundles([watched, once], names(2))
    report = judge(merged).report
    # THEN every rank is in the last snapshot and the culprit on node 1 is found
    assert {s.pid for s in merged.last.processes} == {p.pid for p in merged.job.processes}
    assert report.verdict == "hang" and report.culprit_ranks == (9,)


def test_bundles_of_different_jobs_are_refused_naming_both():
    # GIVEN node 0 of one job and node 1 of another (another run id)
    a = node_bundle(0, 2, 9, T0, workers=1)
    b = node_bundle(1, 2, 9, T0, workers=1, run_id="other-run")
    # WHEN merged THEN one line, exit 2, naming both jobs
    with pytest.raises(HangdocError) as err:
        merge_bundles([a, b], ["a.json", "b.json"])
    assert err.value.exit_code == EXIT_USAGE
    assert str(err.value) == ("a.json and b.json are bundles of different jobs (run bench-run at node0000:29500, "
                              "world size 16 vs run other-run at node0000:29500, world size 16); "
                              "merge the bundles of one job only")


def test_same_run_id_on_another_master_port_is_another_job():
    # GIVEN two static-rendezvous jobs (run id "none" both) on different ports
    a = node_bundle(0, 2, 9, T0, workers=1, run_id="none")
    b = node_bundle(1, 2, 9, T0, workers=1, run_id="none")
    b = dataclasses.replace(b, job=dataclasses.replace(b.job, master_port=29501))
    # WHEN merged THEN refused
    with pytest.raises(HangdocError, match="different jobs .*node0000:29500.* vs run none at node0000:29501"):
        merge_bundles([a, b], ["a.json", "b.json"])


def test_bundles_of_two_runs_of_one_job_are_refused():
    # GIVEN node 1's bundle from a run that started a day later on the same run id and port
    a = node_bundle(0, 2, 9, T0, workers=1)
    b = node_bundle(1, 2, 9, T0 + 86400, workers=1)
    later = tuple(dataclasses.replace(p, start_time=p.start_time + 86400) for p in b.job.processes)
    b = dataclasses.replace(b, job=dataclasses.replace(b.job, processes=later))
    # WHEN merged THEN refused: different runs
    with pytest.raises(HangdocError, match="a.json and b.json are of different runs .* started 24.0 h apart"):
        merge_bundles([a, b], ["a.json", "b.json"])


def test_a_single_process_capture_is_refused_naming_its_file():
    # GIVEN node 1's bundle taken with --single (one process, not the job's node)
    a = node_bundle(0, 2, 9, T0, workers=1)
    b = node_bundle(1, 2, 9, T0, workers=1)
    b = dataclasses.replace(b, job=dataclasses.replace(b.job, single_process=True))
    # WHEN merged THEN one line, exit 2, naming the file
    with pytest.raises(HangdocError) as err:
        merge_bundles([a, b], ["a.json", "b.json"])
    assert err.value.exit_code == EXIT_USAGE
    assert str(err.value) == ("b.json is a --single capture of one process; only bundles of a "
                              "distributed job's nodes can be merged")


def test_one_node_given_twice_is_refused():
    # GIVEN the same node's bundle twice (two captures of one node)
    a = node_bundle(0, 2, 9, T0, workers=1)
    # WHEN merged THEN refused, naming the rank and both files
    with pytest.raises(HangdocError, match=r"rank 0 is in both a.json and a2.json"):
        merge_bundles([a, a], ["a.json", "a2.json"])


def test_a_missing_node_is_said_with_its_ranks():
    # GIVEN nodes 0 and 2 of a 3-node job, the culprit (rank 9) on the missing node 1
    bundles = job_of(3, culprit=9)
    # WHEN the two are merged and diagnosed
    report = judge(merge_bundles([bundles[0], bundles[2]], ["n0.json", "n2.json"])).report
    # THEN a hang whose culprit is not among the captured ranks, and the missing ranks and node are named
    missing = [f for f in report.findings if f.rule == "missing-ranks"]
    assert report.verdict == "hang" and report.culprit_ranks == ()
    assert missing and missing[0].ranks == tuple(range(8, 16)) and missing[0].severity.value == "warning"
    assert missing[0].title == ("Ranks 8-15 (8) of 24 are not in the bundle (node 1 not captured): every rank "
                                "here waits in a collective, so the culprit is on another node")


def test_a_complete_job_says_nothing_is_missing():
    # GIVEN every node WHEN merged THEN no missing-ranks finding
    report = judge(merge_bundles(job_of(3, culprit=9), names(3))).report
    assert not [f for f in report.findings if f.rule == "missing-ranks"]


def test_one_nodes_bundle_alone_says_the_others_are_missing():
    # GIVEN node 1's bundle only (the culprit's node): its ranks are not all waiting
    report = judge(merge_bundles([job_of(2, culprit=9)[1]], ["n1.json"])).report
    # THEN ranks 0-7 on node 0 are said to be missing
    missing = next(f for f in report.findings if f.rule == "missing-ranks")
    assert missing.ranks == tuple(range(8)) and "(node 0 not captured)" in missing.title


def test_the_stack_tree_folds_thousands_of_ranks_into_ranges():
    # GIVEN 64 nodes of 8 ranks (512 ranks), rank 300 waiting on data
    merged = merge_bundles(job_of(64, culprit=300, workers=0), names(64))
    # WHEN the stack prefix tree is drawn
    tree = stack_tree(merged)
    # THEN one line for the shared outer frames, one per branch, with rank ranges
    assert tree[0].startswith("[ranks 0-511 (512)] <module> (train.py) > main (train.py)")
    assert tree[1].startswith("  [ranks 0-299,301-511 (511)] train_step (train.py) > ")
    assert tree[1].endswith("> all_reduce (torch/distributed/distributed_c10d.py)")
    assert tree[2].startswith("  [rank 300] _BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py) > ")
    assert len(tree) == 3


def test_many_ranks_print_the_culprit_and_the_others_grouped():
    # GIVEN a merged report of 512 ranks
    merged = merge_bundles(job_of(64, culprit=300, workers=0), names(64))
    report = judge(merged).report
    # WHEN rendered as text and as Markdown
    text = text_of(report, merged)
    markdown = report_markdown(report)
    # THEN the culprit has its own row with its node and host, the others one row for all of them
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("RANK "))
    rows = [line.split() for line in lines[header + 1:header + 3]]
    assert lines[header].split() == ["RANK", "PID", "NODE", "HOST", "STATE", "FOR", "PROGRESS", "GPU", "TOP", "FRAME"]
    assert rows[0][:5] == ["300", "104", "37", "node0037", "dataloader-wait"]
    assert rows[1][:7] == ["0-299,301-511", "(511)", "-", "64", "nodes", "64", "hosts"]
    assert lines[header + 3].strip() == ""
    assert "| 300 | 104 | node0037 (node 37) | dataloader-wait |" in markdown
    assert "| 0-299,301-511 (511) | - | 64 hosts (64 nodes) | collective-wait |" in markdown
    assert "[rank 300] _BaseDataLoaderIter.__next__" in markdown


def test_a_merged_bundle_round_trips_and_old_bundles_load():
    # GIVEN a merged bundle (processes carry their host) WHEN saved and loaded THEN it is the same
    import json

    merged = merge_bundles(job_of(2, culprit=9, workers=1), names(2))
    again = bundle_from_json(json.dumps(to_dict(merged)))
    assert again == merged and again.schema == BUNDLE_SCHEMA
    # and a bundle written before processes had a host still loads, with no host
    data = to_dict(node_bundle(0, 1, 3, T0, workers=1))
    for proc in data["job"]["processes"]:
        del proc["host"]
    assert all(p.host is None for p in bundle_from_json(json.dumps(data)).job.processes)


def test_a_single_bundle_is_returned_as_it_is():
    bundle = node_bundle(0, 1, 3, T0, workers=1)
    assert merge_bundles([bundle], ["b.json"]) is bundle


def test_one_file_given_twice_is_refused():
    # GIVEN one bundle named twice (a directory and a file in it) WHEN merged THEN refused, saying so
    a = node_bundle(0, 2, 9, T0, workers=1)
    with pytest.raises(HangdocError, match=r"rank 0 is in a.json twice: give each node's bundle once"):
        merge_bundles([a, a], ["a.json", "a.json"])


def test_each_nodes_exit_records_are_kept_with_their_processes():
    # GIVEN three nodes with the same pids (containers), each having read how one of its ranks ended
    from hangdoc.model import ProcessExit

    bundles = []
    for n, bundle in enumerate(job_of(3, culprit=17)):
        rank = bundle.job.ranks[0]
        bundles.append(dataclasses.replace(bundle, exits=(ProcessExit(rank.pid, T0 + 5 + n, signal=9 if n == 2 else None,
                                                                      code=0 if n != 2 else None, source="zombie"),)))
    # WHEN merged
    merged = merge_bundles(bundles, names(3))
    # THEN every exit is kept, renumbered as its process was: each names a rank of the merged job
    assert len(merged.exits) == 3
    ranks = {p.pid: p.rank for p in merged.job.ranks}
    assert sorted(ranks[e.pid] for e in merged.exits) == [0, 8, 16]
    assert next(ranks[e.pid] for e in merged.exits if e.signal == 9) == 16
