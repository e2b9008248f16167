"""What a resume from this checkpoint restores, and the finding when it restarts the epoch.

Pure functions of the checkpoint's `KeyInfo` rows and its side-car's keys.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from hangdoc.check.ckpt_keys import ROOT
from hangdoc.rules.snippets import RESUME_SNIPPET
from hangdoc.check.findings import MAX_EVIDENCE, ordered
from hangdoc.check.model import CheckpointFacts, KeyInfo, Restore
from hangdoc.model import Finding, Rule, Severity, finding

MODEL = "model"
POSITION = "in-epoch position"
LOADER = "data-loader/sampler state"
RNG = "RNG states"

NAMES: dict[str, frozenset[str]] = {
    MODEL: frozenset({"model", "model_state_dict", "state_dict", "module", "net", "network", "ema"}),
    "optimizer": frozenset({"optimizer", "optimizer_state_dict", "optimizer_state", "optim", "opt"}),
    "scheduler": frozenset({"scheduler", "lr_scheduler", "scheduler_state_dict", "lr_scheduler_state_dict",
                            "sched", "scheduler_state"}),
    "epoch": frozenset({"epoch", "epochs", "cur_epoch", "current_epoch"}),
    "step": frozenset({"step", "global_step", "steps", "iteration", "iter", "num_updates", "updates"}),
    POSITION: frozenset({"batch_idx", "batch_index", "batch_id", "step_in_epoch", "iter_in_epoch",
                         "epoch_step", "batches_seen", "samples_seen", "consumed_batches", "consumed_samples"}),
    LOADER: frozenset({"dataloader", "data_loader", "dataloader_state", "dataloader_state_dict",
                       "train_dataloader", "sampler", "sampler_state", "data_state", "dataset_state"}),
    RNG: frozenset({"rng", "rng_state", "rng_states", "torch_rng_state", "cuda_rng_state", "numpy_rng_state",
                    "python_rng_state", "random_state", "np_rng_state"}),
}


def _name(path: str) -> str:
    return path.rsplit(".", 1)[-1].lower()


def _matches(what: str, name: str) -> bool:
    return name in NAMES[what] or (what == RNG and "rng" in name)


def find_restores(keys: Sequence[KeyInfo], side_car: Mapping[str, str]) -> tuple[Restore, ...]:
    found: dict[str, str] = {}
    claimed: list[str] = []
    for key in keys:
        if any(key.path.startswith(prefix + ".") for prefix in claimed):
            continue
        what = _classify(key)
        if what and what not in found:
            found[what] = f"checkpoint {key.path}: {key.summary}"
            claimed.append(key.path)
    for name, value in side_car.items():
        for what in NAMES:
            if what not in found and _matches(what, name.lower()):
                found[what] = f"side-car {name}: {value}"
    if MODEL not in found:
        top = next((k for k in keys if k.kind == "state_dict" and "." not in k.path), None)
        if top is not None:
            found[MODEL] = f"checkpoint {top.path}: {top.summary}"
    return tuple(Restore(what, found.get(what)) for what in NAMES)


def _classify(key: KeyInfo) -> str | None:
    if key.path == ROOT:
        return MODEL
    if key.kind == "optimizer":
        return "optimizer"
    name = _name(key.path)
    for what in NAMES:
        if _matches(what, name) and (what != MODEL or key.kind in ("state_dict", "dict")):
            return what
    return None


def checkpoint_findings(facts: CheckpointFacts) -> tuple[Finding, ...]:
    restores = {r.what: r.found for r in facts.restores}
    if restores[POSITION] or restores[LOADER]:
        return ()
    saved = [what for what, where in restores.items() if where]
    missing = [what for what, where in restores.items() if not where]
    epoch = restores.get("epoch")
    which = f"epoch {epoch.rsplit(': ', 1)[-1]}" if epoch else "the epoch"
    evidence = [f"restores: {', '.join(saved) or 'nothing recognised'}",
                f"missing: {', '.join(missing)}"]
    evidence += [f"{what}: {where}" for what, where in restores.items() if where]
    if facts.side_car:
        evidence.append(f"side-car read: {facts.side_car}")
    return ordered([finding(RESUME_RESTARTS_EPOCH, (),
                            f"resuming restarts {which} at batch 0: no batch index nor data-loader/sampler state "
                            "is saved", evidence, severity=Severity.WARNING, max_evidence=MAX_EVIDENCE)])


# The slugs this checker declares, once: the registry (hangdoc/registry.py) reads RECORDS, so
# `hangdoc rules` lists them and `hangdoc explain` shows their pages; each finding is built from one.
RESUME_RESTARTS_EPOCH = Rule(
    slug="resume-restarts-epoch",
    title='Resuming restarts the epoch at batch 0',
    severity=Severity.WARNING,
    summary='A checkpoint saves neither the position within the epoch (step, batch index) nor the data '
            "loader's state: a resumed job restarts the epoch at batch 0 and trains twice on what it saw "
            'before the save (field notes 4).',
    fix='Save the batch index and the data-loader/sampler state (e.g. torchdata '
        'StatefulDataLoader.state_dict()) and the RNG states with the checkpoint; on resume restore '
        'that state or skip that many batches.',
    snippet=RESUME_SNIPPET,
    commands=("check",),
)

RECORDS = (RESUME_RESTARTS_EPOCH,)
