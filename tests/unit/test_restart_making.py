"""Whose making a restarted start's failure in init_process_group was: the launcher's (a peer's or
the store's address it handed out) or the job's own (an address the script chose), on hand-made bundles."""
from __future__ import annotations

import dataclasses

from test_launcher_discovery import _restarted_bundle

from hangdoc.analyze.restarts import Failure, launcher_made, own_address

GLOO_REFUSED = ("RuntimeError: Gloo connectFullMesh failed with [/pytorch/third_party/gloo/gloo/transport/tcp/"
                "pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:23455")
STORE_TIMEOUT = ("torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying "
                 "to connect to (127.0.0.1, 9).")


def _launched_with_store(bundle):
    """Every rank was handed the launcher's store, localhost:38491."""
    procs = tuple(dataclasses.replace(p, env={**p.env, "MASTER_ADDR": "localhost", "MASTER_PORT": "38491"})
                  for p in bundle.job.processes)
    return dataclasses.replace(bundle, job=dataclasses.replace(bundle.job, processes=procs))


def _failed_in_init(said: str) -> Failure:
    return Failure(generation=1, rank=1, pid=22, time=115.0, code=1, signal=None, said=said,
                   where="distributed_c10d.py:2169 in _new_process_group_helper: backend_class = ProcessGroupGloo(")


def test_a_restart_refused_by_a_peers_gloo_address_is_the_launchers_making():
    # GIVEN a restarted start whose rank 1 failed in gloo's connect to a peer's address (a port that is
    # not the store's, and that no earlier rank was seen listening on)
    bundle = _launched_with_store(_restarted_bundle(second_start_failed=True))
    failure = _failed_in_init(GLOO_REFUSED)
    # WHEN whose making it was is asked
    made, own = launcher_made(bundle, failure), own_address(bundle, failure)
    # THEN the launcher's: the address was a peer's, handed out by the store; never "an address of the job's own"
    assert made is not None and made.startswith("the launcher's own making: ") and "127.0.0.1:23455" in made, made
    assert own is None, own


def test_a_restart_that_reached_for_an_address_of_its_own_is_the_jobs_making():
    # GIVEN a restarted start whose rank 1 timed out reaching a store at an address the launcher never named
    bundle = _launched_with_store(_restarted_bundle(second_start_failed=True))
    failure = _failed_in_init(STORE_TIMEOUT)
    # WHEN whose making it was is asked
    made, own = launcher_made(bundle, failure), own_address(bundle, failure)
    # THEN the job's own: it tried 127.0.0.1:9, not the launcher's store
    assert made is None, made
    assert own is not None and own.startswith("rank 1 tried 127.0.0.1:9, not the store its launcher named "
                                              "(localhost:38491)"), own
