"""Code a fix shows: the snippets the rules' records (and `hangdoc check`) print under the fix."""

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
