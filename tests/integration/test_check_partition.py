"""The partition `check data` predicts is what torch's DataLoader hands each worker in a real job.

A real `torchrun --nproc_per_node=2` gloo job reads a 7-shard list with 2 DataLoader
workers per rank, twice: through a classic IterableDataset (`shards[rank::W][worker::K]`)
and through a datapipe with `sharding_filter` (torch's DataLoader sharding). Every
worker's (rank, worker_id, shard) is recorded to files and compared with the
partition `hangdoc check data --format json` prints.
"""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from factories import write_list, write_shard
from hangdoc.cli import main
from hangdoc.scenarios.launch import start_job, stop_job, torchrun_cmd, wait_for

pytestmark = pytest.mark.integration

JOB = textwrap.dedent('''
    import json, sys, warnings
    from pathlib import Path

    import torch.distributed as dist
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    warnings.simplefilter("ignore")
    from torch.utils.data.datapipes.iter import IterableWrapper

    data_list, out = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    shards = [line.strip() for line in data_list.read_text().splitlines() if line.strip()]


    def seen(shard):
        info = get_worker_info()
        return {"rank": rank, "worker": info.id, "shard": shard}


    class Classic(IterableDataset):
        """The split WeNet's dataset does by hand."""
        def __iter__(self):
            info = get_worker_info()
            for shard in shards[rank::world][info.id::info.num_workers]:
                yield seen(shard)


    for order, dataset in (("classic", Classic()), ("torch", IterableWrapper(shards).sharding_filter().map(seen))):
        rows = list(DataLoader(dataset, batch_size=None, num_workers=2))
        (out / f"{order}-rank{rank}.json").write_text(json.dumps(rows))
    dist.barrier()
    (out / f"done-{rank}").write_text("ready")
    dist.destroy_process_group()
''')


def observed(out: Path, order: str, shards: list[str]) -> list[list[list[int]]]:
    """[rank][worker] -> shard indices, in the order the workers yielded them."""
    got = [[[] for _ in range(2)] for _ in range(2)]
    for rank in range(2):
        for row in json.loads((out / f"{order}-rank{rank}.json").read_text()):
            got[row["rank"]][row["worker"]].append(shards.index(row["shard"]))
    return got


@pytest.mark.timeout(90)
def test_check_data_partition_matches_what_a_real_2_rank_dataloader_hands_each_worker(tmp_path, capsys):
    # GIVEN 7 shards (absolute paths) and a 2-rank job with 2 DataLoader workers per rank
    shards = []
    for i in range(7):
        shards.append(str(write_shard(tmp_path / f"shard{i}.tar", [f"u{i}_{k}" for k in range(3 + i)], seed=i)))
    data_list = write_list(tmp_path / "data.list", shards)
    out = tmp_path / "out"
    out.mkdir()
    script = tmp_path / "job.py"
    script.write_text(JOB)

    # WHEN the real job runs
    job = start_job(torchrun_cmd(script, str(data_list), str(out), nproc=2), log_path=tmp_path / "job.log")
    try:
        done = wait_for([out / "done-0", out / "done-1"], job, timeout=75)
    finally:
        stop_job(job)
    assert done, (tmp_path / "job.log").read_text()[-3000:]

    # AND hangdoc predicts the partition
    code = main(["check", "data", str(data_list), "--world-size", "2", "--num-workers", "2", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1  # 7 shards over 2 x 2: uneven-shards
    predicted = {order: [[w["indices"] for w in r["workers"]] for r in report["facts"][order]["ranks"]]
                 for order in ("classic", "torch")}

    # THEN every worker read exactly the shards hangdoc said, in that order, under both orders
    assert observed(out, "classic", shards) == predicted["classic"] == [[[0, 4], [2, 6]], [[1, 5], [3]]]
    assert observed(out, "torch", shards) == predicted["torch"]
    # AND the utterances per rank are those the job's shards hold
    assert [r["utterances"] for r in report["facts"]["classic"]["ranks"]] == [3 + 5 + 7 + 9, 4 + 6 + 8]
