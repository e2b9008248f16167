"""`hangdoc check` piped into a file or a CI log: its lines are not broken at 80 columns, as the
report's are not (a sentence cut mid-way, a fix that no longer copy-pastes)."""
from __future__ import annotations

from hangdoc.cli import main


def test_check_text_piped_keeps_every_sentence_on_its_line(tmp_path, monkeypatch, capsys):
    # GIVEN a shard list naming shards that do not exist, and stdout that is not a terminal
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{tmp_path}/missing_{i}.tar\n" for i in range(3)))
    monkeypatch.delenv("COLUMNS", raising=False)
    # WHEN `hangdoc check data` prints its text
    main(["check", "data", str(listing), "--world-size", "2", "--num-workers", "1"])
    lines = capsys.readouterr().out.splitlines()
    # THEN the finding's title and its fix are each one whole line
    assert "  3 shards named in the list do not exist: the worker that reaches it stops the job" in lines
    assert any(line.startswith("  fix: Fix the path in the list") and line.endswith("raises and stops the job.")
               for line in lines)
