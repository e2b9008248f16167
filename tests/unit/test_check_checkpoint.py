"""`hangdoc check checkpoint` on real checkpoints saved with torch, and files that are not."""
from __future__ import annotations

import json
import os
import pickle
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # torch's "Failed to initialize NumPy" on a numpy-less venv
    torch = pytest.importorskip("torch")

from hangdoc.registry import record  # noqa: E402
from hangdoc.check.ckpt_load import parse_top_level  # noqa: E402
from hangdoc.cli import main  # noqa: E402


@pytest.fixture(autouse=True)
def wide_plain_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")


def model_state() -> dict:
    return torch.nn.Linear(4, 3).state_dict()


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["check", "checkpoint", *args])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, path) -> tuple[int, dict]:
    code, out, _ = run(capsys, str(path), "--format", "json")
    return code, json.loads(out)


def restores(report: dict) -> dict[str, str | None]:
    return {r["what"]: r["found"] for r in report["facts"]["restores"]}


def test_wenet_checkpoint_without_in_epoch_position_restarts_the_epoch(tmp_path, capsys):
    # GIVEN a WeNet-style checkpoint: a bare model state_dict and its side-car yaml
    torch.save(model_state(), tmp_path / "epoch_3.pt")
    (tmp_path / "epoch_3.yaml").write_text(
        "epoch: 3\nstep: 12000\nlrs:\n- 0.001\nloss_dict:\n  loss: 4.2\ntag: epoch_3\n")
    # WHEN checked
    code, report = run_json(capsys, tmp_path / "epoch_3.pt")
    # THEN resume-restarts-epoch warns, naming epoch 3 and what is missing; exit 1
    assert code == 1
    [finding] = report["findings"]
    assert finding["rule"] == "resume-restarts-epoch"
    assert finding["severity"] == "warning"
    assert finding["title"].startswith("resuming restarts epoch 3 at batch 0")
    assert "missing: optimizer, scheduler, in-epoch position, data-loader/sampler state, RNG states" \
        in finding["evidence"]
    assert finding["fix"] == record("resume-restarts-epoch").fix
    found = restores(report)
    assert found["model"] == "checkpoint <root>: 2 tensors, 15 values"
    assert found["epoch"] == "side-car epoch: 3"
    assert found["step"] == "side-car step: 12000"
    assert found["in-epoch position"] is None
    assert report["facts"]["side_car_keys"]["lrs"] == "(1 nested line)"


def test_text_output_shows_what_a_resume_restores(tmp_path, capsys):
    torch.save({"model": model_state(), "epoch": 2}, tmp_path / "ckpt.pt")
    code, out, _ = run(capsys, str(tmp_path / "ckpt.pt"))
    assert code == 1
    assert "WARNING  resume-restarts-epoch" in out
    assert "in-epoch position           NOT SAVED" in out
    assert "epoch                       checkpoint epoch: 2" in out


def test_checkpoint_with_batch_index_and_loader_state_resumes_mid_epoch(tmp_path, capsys):
    # GIVEN model, optimizer, scheduler, epoch, step, batch index, loader state and RNG
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 10)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "epoch": 2, "step": 500, "batch_idx": 120, "dataloader": {"sampler_iter_yielded": 120},
                "rng_state": torch.get_rng_state()}, tmp_path / "full.pt")
    # WHEN checked THEN there is nothing to find and every part is restored
    code, report = run_json(capsys, tmp_path / "full.pt")
    assert code == 0
    assert report["findings"] == []
    found = restores(report)
    assert all(found.values()), found
    assert found["in-epoch position"] == "checkpoint batch_idx: 120"
    assert found["optimizer"] == "checkpoint optimizer: optimizer state, 1 param group"


def test_a_batch_index_in_the_side_car_is_enough(tmp_path, capsys):
    torch.save(model_state(), tmp_path / "step_900.pt")
    (tmp_path / "step_900.yaml").write_text("epoch: 1\nstep: 900\nbatch_idx: 300\n")
    code, report = run_json(capsys, tmp_path / "step_900.pt")
    assert code == 0
    assert restores(report)["in-epoch position"] == "side-car batch_idx: 300"


def test_a_file_that_is_not_a_checkpoint_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "notes.pt").write_text("these are my notes, not a checkpoint\n")
    code, out, err = run(capsys, str(tmp_path / "notes.pt"))
    assert code == 2
    assert err.startswith(f"hangdoc: error: {tmp_path / 'notes.pt'} is not a torch checkpoint")
    assert len(err.strip().splitlines()) == 1 and out == ""


class Exploit:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_needs_unsafe_unpickling_is_refused_and_never_runs(tmp_path, capsys):
    # GIVEN a pickle that would run a shell command when unpickled
    marker = tmp_path / "pwned"
    with open(tmp_path / "evil.pt", "wb") as f:
        pickle.dump({"model": Exploit(str(marker))}, f, protocol=2)
    # WHEN checked THEN weights_only refuses it: exit 2, one line, and the command never ran
    code, _, err = run(capsys, str(tmp_path / "evil.pt"))
    assert code == 2
    assert "needs unsafe unpickling (weights_only refused: unsupported GLOBAL posix.system" in err
    assert len(err.strip().splitlines()) == 1
    assert not marker.exists()


class Custom:
    pass


def test_a_torch_save_of_a_custom_class_needs_unsafe_unpickling(tmp_path, capsys):
    torch.save({"model": model_state(), "trainer": Custom()}, tmp_path / "custom.pt")
    code, _, err = run(capsys, str(tmp_path / "custom.pt"))
    assert code == 2
    assert "needs unsafe unpickling" in err and "Custom" in err


@pytest.mark.parametrize("name, message", [
    ("missing.pt", "checkpoint not found"),
    ("empty.pt", "is not a torch checkpoint (torch.load: EOFError: empty or truncated file)"),
    ("list.pt", "holds a list, not a checkpoint dict"),
])
def test_missing_empty_and_non_dict_files_exit_2(tmp_path, capsys, name, message):
    (tmp_path / "empty.pt").write_bytes(b"")
    torch.save([1, 2, 3], tmp_path / "list.pt")
    code, _, err = run(capsys, str(tmp_path / name))
    assert code == 2
    assert message in err


def test_side_car_parser_reads_top_level_keys_without_pyyaml():
    text = ("# saved by wenet\nepoch: 3\nstep: 1200\nlrs:\n- 0.001\n- 0.002\n"
            "tag: 'epoch_3'\nsave_time: 01/02/2024 10:00\n")
    assert parse_top_level(text) == {"epoch": "3", "step": "1200", "lrs": "(2 nested lines)",
                                     "tag": "epoch_3", "save_time": "01/02/2024 10:00"}
