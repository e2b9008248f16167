"""The fix for each rule, said once: `hangdoc check` and the live rules import these texts.

`ADVICE[slug]` is a small frozen `Advice`: a one-line title, the one-line fix and,
where code is the fix, a snippet. The first block is shared with the live watcher's
rules; the second holds the slugs only the preflight `check` raises.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Advice:
    title: str
    fix: str
    snippet: str | None = None


SPAWN_SNIPPET = """\
import multiprocessing as mp
loader = DataLoader(dataset, num_workers=K,
                    multiprocessing_context=mp.get_context("spawn"))"""

JOIN_SNIPPET = """\
from torch.distributed.algorithms.join import Join
with Join([model]):   # a rank out of batches shadows the others' collectives
    for batch in loader:
        ..."""

RESUME_SNIPPET = """\
from torchdata.stateful_dataloader import StatefulDataLoader
loader = StatefulDataLoader(dataset, num_workers=K)
torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "epoch": epoch, "step": step,
            "batch_idx": batch_idx, "dataloader": loader.state_dict(),
            "rng_state": torch.get_rng_state()}, path)
# resume: loader.load_state_dict(ckpt["dataloader"])
#     or: skip ckpt["batch_idx"] batches of the epoch"""

BYTES_FIRST_SNIPPET = """\
data = tar.extractfile(member).read()
waveform, sample_rate = torchaudio.load(io.BytesIO(data))"""

REPACK_SNIPPET = """\
bzip2 -dc shard.tar.bz2 > shard.tar     # audio is compressed already: plain tar loses little"""


ADVICE: dict[str, Advice] = {
    # --- shared with the live rules -------------------------------------------------
    "slow-decompression": Advice(
        "Compressed shards decompress slower than the rank's DataLoader workers must deliver",
        "Re-pack the shards as uncompressed .tar (bz2 decompresses at tens of MB/s per core) "
        "or spread the compressed shards evenly over ranks and add DataLoader workers.",
        REPACK_SNIPPET,
    ),
    "uneven-shards": Advice(
        "Ranks get different amounts of data and leave the epoch at different times",
        "Make the shard count a multiple of world_size x num_workers with equal-sized shards, "
        "or make the ranks stop together: WeNet's join (a monitored_barrier on a gloo group with "
        "a short timeout) or torch.distributed.algorithms.Join around the epoch loop.",
        JOIN_SNIPPET,
    ),
    "fork-unsafe-arm": Advice(
        "DataLoader workers forked on aarch64 inherit OpenMP / Arm Compute Library thread pools",
        "Start DataLoader workers with spawn: DataLoader(..., multiprocessing_context="
        "mp.get_context('spawn')); the dataset and collate_fn must be picklable.",
        SPAWN_SNIPPET,
    ),
    "resume-restarts-epoch": Advice(
        "Resuming restarts the epoch at batch 0",
        "Save the batch index and the data-loader/sampler state (e.g. torchdata "
        "StatefulDataLoader.state_dict()) and the RNG states with the checkpoint; on resume "
        "restore that state or skip that many batches.",
        RESUME_SNIPPET,
    ),
    "gpu-starved": Advice(
        "The GPU waits for data",
        "Raise num_workers (up to the cores per rank), use larger batches and prefetch_factor, "
        "pack small clips into tar shards, or cache features.",
    ),
    "tar-member-decode": Advice(
        "Audio is decoded straight from a tar member's file object",
        "Read the member's bytes first and decode from memory: "
        "torchaudio.load(io.BytesIO(tar.extractfile(member).read())).",
        BYTES_FIRST_SNIPPET,
    ),
    "worker-deadlock": Advice(
        "A DataLoader worker is blocked on a lock it inherited",
        "Start workers with spawn or forkserver (multiprocessing_context=...) and create "
        "threads, locks and clients in worker_init_fn, not before the DataLoader forks.",
        SPAWN_SNIPPET,
    ),
    "worker-died": Advice(
        "A DataLoader worker was killed by a signal",
        "Read the signal: Segmentation fault on aarch64 -> spawn start method; Bus error -> "
        "/dev/shm too small (docker --shm-size); Killed -> out of memory (fewer workers, "
        "smaller prefetch_factor).",
    ),
    "worker-error": Advice(
        "A DataLoader worker raised an exception",
        "Fix the exception in the worker's traceback; check that every sample gets every key "
        "(a decode function that sets sample['wav'] in only one branch).",
    ),
    "dataloader-stall": Advice(
        "A rank waits on its DataLoader and its workers make no progress",
        "Set DataLoader(timeout=...) so a stuck worker raises instead of hanging, and look at "
        "the worker stacks for the I/O or decode frame they sit in.",
    ),
    "collective-straggler": Advice(
        "One rank is late to a collective; the others wait for it",
        "Look at what the late rank is doing and balance its data or work. To name the exact "
        "collective next time, keep PyTorch's Flight Recorder on (TORCH_FR_BUFFER_SIZE=2000; "
        "TORCH_NCCL_TRACE_BUFFER_SIZE is its legacy alias), let NCCL dump it on a timeout "
        "(TORCH_NCCL_DUMP_ON_TIMEOUT=1) or on hangdoc's request (TORCH_NCCL_DEBUG_INFO_PIPE_FILE=/tmp/fr_pipe_), "
        "and set a shorter init_process_group(timeout=...).",
    ),
    "flight-recorder": Advice(
        "The Flight Recorder shows ranks that never issued the collective the others wait in",
        "Find out why the ranks named never reached that collective (their live stack says where they "
        "are; the others' FR frames say where it is issued): a rank still computing or loading data, a "
        "data-dependent branch, or an epoch that ends early on one rank; every rank must issue the same "
        "collectives in the same order with the same shapes and dtypes.",
    ),
    "collective-mismatch": Advice(
        "Ranks wait in different collectives",
        "Make every rank run the same collectives in the same order: give every rank the same "
        "number of batches and stop the epoch together (Join, or a monitored_barrier on a gloo group).",
        JOIN_SNIPPET,
    ),
    # --- preflight only ---------------------------------------------------------------
    "missing-shard": Advice(
        "A file named in the data list does not exist",
        "Fix the path in the list (relative paths resolve against the list's directory) or "
        "remove the line; the worker that reaches it raises and stops the job.",
    ),
    "unreadable-shard": Advice(
        "A shard cannot be read as a tar archive",
        "Re-create or re-download the shard (check permissions and truncated copies), or "
        "remove it from the list.",
    ),
    "unpaired-member": Advice(
        "A shard's members do not pair up as key.wav + key.txt",
        "Re-pack the shard so that every utterance is two adjacent members key.<audio> and "
        "key.txt, with no other members.",
    ),
    "empty-shard": Advice(
        "A shard holds no members",
        "Remove empty shards from the list; they make their worker's share smaller.",
    ),
    "empty-worker": Advice(
        "Some DataLoader workers get no shard",
        "Nothing breaks, but those workers idle; use fewer workers or more, smaller shards "
        "(at least world_size x num_workers).",
    ),
    "remote-shard": Advice(
        "A shard is a URL and was not checked",
        "Run `hangdoc check data` where the shards are mounted to check them.",
    ),
    "bad-list-entry": Advice(
        "A line of the data list cannot be parsed",
        "Fix the line: a shard list holds one tar path per line; a raw list one JSON object "
        "with key, wav and txt per line.",
    ),
    "missing-audio": Advice(
        "A raw list names an audio file that does not exist",
        "Fix the wav path in the list or remove the line.",
    ),
    "cpu-oversubscribed": Advice(
        "More DataLoader workers than CPU cores on the node",
        "Use at most cores / ranks-per-node workers per rank and set OMP_NUM_THREADS=1 in "
        "workers; oversubscribed workers deliver less, not more.",
    ),
    "ptrace-denied": Advice(
        "py-spy will not be allowed to read the job's stacks",
        "Run hangdoc as the job's user or root, set kernel.yama.ptrace_scope=0, or start the "
        "container with --cap-add=SYS_PTRACE.",
    ),
    "py-spy-missing": Advice(
        "py-spy is not installed",
        "pip install py-spy (the wheel carries the binary).",
    ),
    "nvml-unavailable": Advice(
        "NVML cannot be read: GPU utilisation will be missing from diagnoses",
        "Install the NVIDIA driver (libnvidia-ml.so.1) or run where the GPUs are visible.",
    ),
    "shm-too-small": Advice(
        "/dev/shm cannot hold the batches the DataLoader workers prefetch",
        "Enlarge /dev/shm (docker --shm-size=16g, Kubernetes: an emptyDir with medium: Memory) "
        "or lower num_workers / prefetch_factor.",
    ),
    "collective-timeout-disabled": Advice(
        "A hung collective will never time out",
        "Unset TORCH_NCCL_ASYNC_ERROR_HANDLING=0 (and NCCL_ASYNC_ERROR_HANDLING=0) so the "
        "process-group timeout ends a hung job with an error.",
    ),
}


def advice(slug: str) -> Advice:
    """The advice for `slug`; a KeyError names the slug that has none."""
    return ADVICE[slug]
