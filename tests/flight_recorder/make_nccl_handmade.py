"""Write the HAND-MADE NCCL-shaped Flight Recorder dumps in nccl-handmade/ (no GPU was available).

    python tests/flight_recorder/make_nccl_handmade.py

Eight ranks of one default group, the shape torch 2.13's NCCL backend writes to
TORCH_FR_DUMP_TEMP_FILE<rank> (pickle; FR format 2.10; entries as in the recorded gloo dumps,
plus NCCL's states and timings): ranks 0-6 started all_reduce #4812 in the backward pass and
never completed it; rank 7 completed #4811 and never issued #4812.
"""
import pickle
from pathlib import Path

OUT = Path(__file__).with_name("nccl-handmade")
WORLD = 8
STEP = [{"name": "all_reduce", "filename": "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py",
         "line": 3245},
        {"name": "_run_ddp_forward", "filename": "/opt/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py",
         "line": 1460},
        {"name": "train_one_epoch", "filename": "/workspace/wenet/utils/executor.py", "line": 87},
        {"name": "main", "filename": "/workspace/wenet/bin/train.py", "line": 164}]


def entry(record_id: int, seq: int, state: str, t0: int) -> dict:
    done = state == "completed"
    return {
        "record_id": record_id, "pg_id": 0, "process_group": ("0", "default_pg"),
        "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce",
        "time_created_ns": t0, "duration_ms": 41.5 if done else None,
        "input_sizes": [[25557032]], "input_dtypes": ["Float"],
        "output_sizes": [[25557032]], "output_dtypes": ["Float"],
        "state": state, "time_discovered_started_ns": t0 + 1_000_000 if state != "scheduled" else None,
        "time_discovered_completed_ns": t0 + 42_000_000 if done else None,
        "retired": done, "timeout_ms": 600000, "is_p2p": False, "frames": STEP,
    }


def dump(rank: int) -> dict:
    last = 4811 if rank == 7 else 4812
    t0 = 1_795_465_000_000_000_000
    entries = [entry(i, seq, "completed" if seq < 4812 else "started", t0 + i * 900_000_000)
               for i, seq in enumerate(range(4809, last + 1))]
    return {
        "version": "2.10", "comm_lib_version": "2.26.2", "nccl_comm_state": {},
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(WORLD)))}},
        "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                            "last_completed_collective": 4811}},
        "entries": entries,
    }


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    for rank in range(WORLD):
        (OUT / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump(rank)))
