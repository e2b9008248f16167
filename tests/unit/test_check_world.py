"""`check data` without --world-size: the world size this node knows, and the assumption said."""
from __future__ import annotations

import pytest

from hangdoc.check.world import known_world_size
from hangdoc.cli import main


def no_job():
    return []


def test_torchruns_world_size_in_the_environment_comes_first(tmp_path):
    # GIVEN WORLD_SIZE set (a shell inside the job, or torchrun's variables exported) and a job of 2 here
    # WHEN the world size is looked for THEN it is WORLD_SIZE's, and says so
    assert known_world_size({"WORLD_SIZE": "16"}, lambda: [2], tmp_path) == (16, "WORLD_SIZE in the environment")


def test_the_job_running_on_this_node_gives_it(tmp_path):
    # GIVEN no WORLD_SIZE and one job of 8 ranks on this node THEN 8, the job's
    assert known_world_size({}, lambda: [8, 8], tmp_path) == (8, "the world size of the job running on this node")


def test_else_one_rank_per_visible_gpu(tmp_path):
    # GIVEN no job and no WORLD_SIZE, on a node with 4 GPUs (and NVIDIA's control devices)
    for name in ("nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    # THEN 4, or what CUDA_VISIBLE_DEVICES leaves visible
    assert known_world_size({}, no_job, tmp_path) == (4, "one rank per GPU: 4 visible on this node")
    assert known_world_size({"CUDA_VISIBLE_DEVICES": "0,1"}, no_job, tmp_path)[0] == 2
    # AND jobs of different sizes say nothing of which one is meant
    assert known_world_size({}, lambda: [2, 4], tmp_path)[0] == 4


def test_else_one_rank(tmp_path):
    assert known_world_size({}, no_job, tmp_path) == (1, "no job on this node, no WORLD_SIZE and no GPU: one rank")


def test_check_data_without_world_size_checks_and_says_what_it_assumed(tmp_path, monkeypatch, capsys):
    # GIVEN a shard list, and torchrun's WORLD_SIZE in the environment
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{tmp_path}/s{i}.tar\n" for i in range(4)))
    monkeypatch.setenv("WORLD_SIZE", "2")
    # WHEN `hangdoc check data LIST -k 1` runs without --world-size
    main(["check", "data", str(listing), "--num-workers", "1"])
    out, err = capsys.readouterr()
    # THEN it checks 2 ranks rather than refusing, and says where 2 came from
    assert "hangdoc check data: 4 shards in 1 list, 2 ranks x 1 worker" in out
    assert ("hangdoc: --world-size not given: checking for 2 ranks (WORLD_SIZE in the environment); "
            "pass --world-size W for another") in err.splitlines()


def test_check_data_without_num_workers_checks_one_worker_and_says_so(tmp_path, monkeypatch, capsys):
    # GIVEN a shard list and torchrun's WORLD_SIZE in the environment
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{tmp_path}/s{i}.tar\n" for i in range(4)))
    monkeypatch.setenv("WORLD_SIZE", "2")
    # WHEN `hangdoc check data LIST` runs with no option at all
    main(["check", "data", str(listing)])
    out, err = capsys.readouterr()
    # THEN it checks 1 worker per rank (DataLoader's default reads as one) and says it assumed so
    assert "hangdoc check data: 4 shards in 1 list, 2 ranks x 1 worker" in out
    assert ("hangdoc: --num-workers not given: checking for 1 worker per rank (DataLoader's default, "
            "num_workers=0, reads in the rank as one worker); pass --num-workers K for another") in err.splitlines()
