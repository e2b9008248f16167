"""A job of many nodes diagnosed by class gives the report the whole merge gives, in class rows."""
from __future__ import annotations

import dataclasses
import io

import msgspec
import pytest
import zstandard

from hangdoc.bundle import codec as bundle_v2
from hangdoc.analyze.diagnose import node_digest
from hangdoc.report import judge
from factories import node_bundle, save_node
from hangdoc.bundle.files import load_bundles
from hangdoc.base.errors import BadBundle, HangdocError
from hangdoc.inputs.fold import FOLD_ABOVE_RANKS
from hangdoc.inputs.evidence import report_from_files
from hangdoc.render.text import render_text
from hangdoc.base.serde import to_json

T0 = 1_700_000_000.0
NODES = 16          # 128 ranks: past FOLD_ABOVE_RANKS, so report DIR folds


def write_job(folder, culprit: int, nodes: int = NODES, skip=(), how: str = "v2"):
    """GIVEN the bundles of every node (but `skip`) of a job, rank `culprit` waiting on its data."""
    for n in range(nodes):
        if n in skip:
            continue
        bundle = node_bundle(n, nodes, culprit, T0, workers=2)
        if how == "v1":
            (folder / f"node{n:02d}.json").write_bytes(to_json(bundle))
        elif how == "no-digest":
            (folder / f"node{n:02d}.json.zst").write_bytes(zstandard.ZstdCompressor().compress(bundle_v2.encode(bundle)))
        else:
            save_node(bundle, folder / f"node{n:02d}.json.zst")
    return folder


def whole(folder):
    """The report of the same bundles merged whole, rank by rank (the path below FOLD_ABOVE_RANKS)."""
    return judge(load_bundles([folder])).report


def summary(report):
    return (report.verdict, report.culprit_ranks,
            [(f.rule, f.severity, f.ranks) for f in report.findings])


def test_a_job_of_128_ranks_by_class_names_the_same_culprit_and_findings_as_the_whole_merge(tmp_path):
    folder = write_job(tmp_path, culprit=77)
    assert NODES * 8 > FOLD_ABOVE_RANKS

    # WHEN report DIR reads it (by class) and the same bundles are merged whole
    bundle, folded = report_from_files([folder])
    folded = folded.report
    full = whole(folder)

    # THEN verdict, culprits and findings agree, and the evidence counts every rank
    assert folded.verdict == "hang" and folded.culprit_ranks == (77,)
    assert summary(folded) == summary(full)
    straggler = next(f for f in folded.findings if f.rule == "collective-straggler")
    assert "127 of 128 ranks wait in all_reduce" in straggler.evidence[0]
    # the rows are classes: every rank in exactly one row, the culprit alone
    rows = folded.ranks
    assert len(rows) == 2 and len(full.ranks) == 128
    covered = [r for row in rows for r in row.members]
    assert sorted(covered) == list(range(128))
    culprit_row = next(r for r in rows if r.rank == 77)
    assert culprit_row.rank_count == 1 and culprit_row.rank_set is None
    majority = next(r for r in rows if r.rank != 77)
    assert majority.rank_count == 127 and majority.rank_set == "0-76,78-127"
    # only the nodes holding a class's lowest rank were read whole
    assert {p.host for p in bundle.job.ranks} == {"node0000", "node0009"}


def test_the_text_report_of_a_folded_job_shows_class_rows_and_the_whole_stack_tree(tmp_path):
    folder = write_job(tmp_path, culprit=77)
    bundle, report = report_from_files([folder])
    report = report.report

    out = io.StringIO()
    render_text(report, out, width=200)
    text = out.getvalue()

    assert "0-76,78-127 (127)" in text
    assert "Stacks of 128 ranks in 2 classes" in text
    assert "[rank 77]" in text


def test_every_rank_waiting_and_nodes_missing_say_the_culprit_is_on_a_missing_node(tmp_path):
    # GIVEN nodes 3 and 4 not captured, and every captured rank in all_reduce (the culprit, rank 30, is missing)
    folder = write_job(tmp_path, culprit=30, skip=(3, 4))

    _, folded = report_from_files([folder])
    folded = folded.report
    full = whole(folder)

    assert summary(folded) == summary(full)
    missing = next(f for f in folded.findings if f.rule == "missing-ranks")
    assert missing.ranks == tuple(range(24, 40))
    assert "node 3-4 not captured" in missing.title
    assert "112 of 112 captured ranks wait in all_reduce" in missing.evidence[-1]


@pytest.mark.parametrize("how", ["v1", "no-digest"])
def test_bundles_without_a_digest_are_read_whole_and_give_the_same_report(tmp_path, how):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    digested = write_job(tmp_path / "a", culprit=77)
    plain = write_job(tmp_path / "b", culprit=77, how=how)

    _, a = report_from_files([digested])
    a = a.report
    _, b = report_from_files([plain])
    b = b.report

    assert summary(a) == summary(b)
    assert [(r.rank, r.rank_set) for r in a.ranks] == [(r.rank, r.rank_set) for r in b.ranks]


def test_a_digest_of_another_analysis_version_is_not_trusted(tmp_path):
    # GIVEN node 9's digest written by another analysis version, and claiming rank 77 waits in all_reduce
    folder = write_job(tmp_path, culprit=77)
    bundle = node_bundle(9, NODES, 77, T0, workers=2)
    digest = node_digest(bundle)
    lying = msgspec.structs.replace(
        digest, version=digest.version + 1,
        ranks=tuple(msgspec.structs.replace(r, state="collective-wait", detail="all_reduce") for r in digest.ranks))
    path = folder / "node09.json.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress(bundle_v2.encode(bundle, lying)))

    _, report = report_from_files([folder])
    report = report.report

    assert report.verdict == "hang" and report.culprit_ranks == (77,)


def test_a_damaged_digest_is_one_line_naming_the_file(tmp_path):
    folder = write_job(tmp_path, culprit=77)
    path = folder / "node02.json.zst"
    doc = msgspec.json.decode(zstandard.ZstdDecompressor().decompress(path.read_bytes()))
    doc["digest"]["ranks"][0]["points"] = "many"
    path.write_bytes(zstandard.ZstdCompressor().compress(msgspec.json.encode(doc)))

    with pytest.raises(BadBundle, match=r"node02\.json\.zst is damaged: .*points"):
        report_from_files([folder])


def test_two_captures_of_one_node_are_refused_by_class_as_they_are_whole(tmp_path):
    folder = write_job(tmp_path, culprit=77)
    (folder / "node02-again.json.zst").write_bytes((folder / "node02.json.zst").read_bytes())

    with pytest.raises(HangdocError, match=r"rank 16 is in both .*node02-again\.json\.zst and .*node02\.json\.zst"):
        report_from_files([folder])


def test_a_merge_keeps_every_nodes_flight_recorder_dumps_and_data_lists():
    from hangdoc.bundle.merge import merge_bundles
    from hangdoc.model import DataListCopy, FlightRecord

    # GIVEN two nodes, each with its ranks' Flight Recorder dumps and a copy of the data list
    nodes = []
    for n in range(2):
        bundle = node_bundle(n, 2, 3, T0, ranks_per_node=2, workers=1)
        records = tuple(FlightRecord(rank=r, source=f"/tmp/fr_{r}", form="json", version="2.10", trigger="pipe")
                        for r in (2 * n, 2 * n + 1))
        nodes.append(dataclasses.replace(bundle, flight_records=records, flight_errors=(f"rank {2 * n}: late",),
                                         data_lists=(DataListCopy("/data/train.list", "shard", (), ()),)))
    # WHEN merged
    merged = merge_bundles(nodes)
    # THEN the job's record holds every rank's dump, tagged with its node, and the list once
    assert [(r.rank, r.host) for r in merged.flight_records] == [(0, "node0000"), (1, "node0000"),
                                                                 (2, "node0001"), (3, "node0001")]
    assert merged.flight_errors == ("node0000: rank 0: late", "node0001: rank 2: late")
    assert len(merged.data_lists) == 1


@pytest.mark.parametrize("how", ["v2", "no-digest"])
def test_a_single_process_capture_is_refused_by_class_as_it_is_whole(tmp_path, how):
    # GIVEN a job folded by class, one node's bundle replaced by a --single capture (with a digest, or read whole)
    folder = write_job(tmp_path, culprit=77)
    single = node_bundle(3, NODES, 77, T0, workers=2)
    single = dataclasses.replace(single, job=dataclasses.replace(single.job, single_process=True))
    (folder / "node03.json.zst").unlink()
    if how == "v2":
        save_node(single, folder / "node03.json.zst")
    else:
        (folder / "node03.json.zst").write_bytes(zstandard.ZstdCompressor().compress(bundle_v2.encode(single)))
    # WHEN the folder is reported
    # THEN one line names the file, as the whole merge does
    with pytest.raises(HangdocError, match=r"node03\.json\.zst is a --single capture of one process"):
        report_from_files([folder])


def test_the_parts_nodes_hold_alike_are_held_once_and_read_the_same(tmp_path):
    # GIVEN two nodes of a job whose ranks' workers read alike (the same pids, states and frames)
    from hangdoc.inputs.fold import Shared, read_node

    write_job(tmp_path, culprit=100, nodes=2)
    files = sorted(tmp_path.glob("*.zst"))
    # WHEN they are read with one Shared, and each alone
    shared = Shared()
    together = [read_node(f, shared) for f in files]
    alone = [read_node(f) for f in files]
    # THEN they read the same, and the second node's ranks hold the first's workers and words,
    # and a node's ranks one copy of its host's name
    assert [n.digest for n in together] == [n.digest for n in alone]
    first, second = together[0].digest.ranks[0], together[1].digest.ranks[0]
    assert second.workers is first.workers and second.state is first.state and second.top_frame is first.top_frame
    assert together[1].digest.ranks[1].host is second.host
    assert alone[1].digest.ranks[0].workers is not alone[0].digest.ranks[0].workers
