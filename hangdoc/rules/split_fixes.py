"""The fix of each cause of a split (`SplitCause`: why the ranks parted ways in their own code), shared
by collective-mismatch and flight-recorder, whose mismatch is the same split read from the Flight Recorder."""
from __future__ import annotations

from hangdoc.model import SplitCause

_UNEVEN = ('Give every rank the same number of batches and stop the epoch together: `drop_last=True` on the '
           'DistributedSampler (or shards split evenly over ranks and workers), or wrap the loop in '
           '`torch.distributed.algorithms.Join` so the ranks that finish early shadow the others\' collectives.')
FIXES = {
    SplitCause.HANDLER_COLLECTIVE:
        "An exception handler runs a collective on the rank that raised, alone. Agree on the error first: "
        "all-reduce an error flag every step (`flag = torch.tensor(int(failed)); dist.all_reduce(flag, "
        "op=dist.ReduceOp.MAX)`) so every rank takes the handler's collective together, or re-raise and keep "
        "collectives out of the handler (let the launcher restart the job).",
    SplitCause.SWALLOWED_EXCEPTION:
        "An exception swallowed on one rank skipped a collective the others ran. Re-raise it (a failed step "
        "should fail the job, which the launcher can restart), or decide together: all-reduce an error flag "
        "before the collective so every rank skips it or none does.",
    SplitCause.OWN_DECISION:
        "A decision taken on one rank's own values (early stopping on its own validation loss, a flag of its "
        "own) sent the ranks different ways. Decide on one rank and broadcast it (`dist.broadcast_object_list`), "
        "or all-reduce the flag (`stop = torch.tensor(int(stop)); dist.all_reduce(stop, op=dist.ReduceOp.MAX)`) "
        "so every rank takes the branch together.",
    SplitCause.CLOCK_DECISION:
        "A decision taken on each rank's own clock (a checkpoint or an evaluation every N seconds) comes due "
        "at different steps on different ranks. Decide on rank 0 and broadcast it every step, or count steps "
        "instead of seconds.",
    SplitCause.RANK_BRANCH:
        "A collective inside a branch on the rank (`if rank == 0:`) runs on that rank alone. Every rank must "
        "call every collective (for `gather`/`gather_object`, every rank calls it and only `dst` receives); "
        "move the collective out of the branch and keep only the rank's own work inside it.",
    SplitCause.WRAPPER_ON_ONE_RANK:
        "The {wrapper}-wrapped model is called on one rank alone, and its forward runs collectives of its own "
        "({wait}). For work on one rank (validation, logging, export), call the wrapped module directly "
        "(`model.module(x)`), or run that work on every rank.",
    SplitCause.EARLY_RETURN:
        "A function returns early on some ranks and skips the collective the others run inside it. Return "
        "on every rank or none: move the collective before the early return, or make the condition the same "
        "on every rank (broadcast or all-reduce it).",
    SplitCause.UNEVEN_DATA: _UNEVEN,
    SplitCause.SKIPPED:
        "Make every rank run the same collectives in the same order: the rank that left skipped the "
        "collective the others wait in; read the line where its path left (above) for why.",
    SplitCause.UNKNOWN:
        "Make every rank run the same collectives in the same order: compare the lines each rank stands at "
        "(above) and find the branch, handler or early exit one of them took alone.",
}
