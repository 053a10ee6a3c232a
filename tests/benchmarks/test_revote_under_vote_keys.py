"""``jupiter bench revote``: a finished run decided again under each vote key, from its results.jsonl alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.dabench import DabenchData
from benchmarks.records import CandidateRecord, TaskRecord
from benchmarks.revote import revote
from jupiter.task import Task

FORMAT = '@mean_fare[mean_fare] where "mean_fare" is a float number rounded to two decimal places.'


def _data() -> DabenchData:
    tasks = (Task(id="1", question="q", format=FORMAT), Task(id="2", question="q", format=FORMAT))
    labels = ({"id": 1, "common_answers": [["mean_fare", "34.65"]]},
              {"id": 2, "common_answers": [["mean_fare", "7.1"]]})
    return DabenchData(tasks=tasks, labels=labels, questions=(), folder=Path("."))


def _run(tmp_path: Path) -> Path:
    def candidates(*answers: tuple[str, int]) -> tuple[CandidateRecord, ...]:
        return tuple(CandidateRecord(f"0.{i}", a, a, 0.0, i, multiplicity=m) for i, (a, m) in enumerate(answers))

    records = [
        # the README demo's tie: 34.6459 and 34.65 are one answer at two decimals, 4 votes against 2
        TaskRecord("1", "dabench", None, candidates=candidates(("@mean_fare[7.92]", 2), ("@mean_fare[34.6459]", 2),
                                                               ("@mean_fare[34.65]", 2))),
        # placeholder copies outvote the right answer under the plain vote only
        TaskRecord("2", "dabench", None, candidates=candidates(("@mean_fare[mean_fare]", 3), ("@mean_fare[7.1]", 1))),
    ]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    return tmp_path


def test_the_format_key_gains_the_ties_and_placeholder_wins_of_the_plain_vote(tmp_path: Path):
    outcome = revote(_run(tmp_path), _data())
    assert outcome["right"] == {"exact": 0, "format": 2}
    assert outcome["gained"] == ["1", "2"] and outcome["lost"] == []


def test_a_folder_without_results_is_named(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "bench", "revote", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no results.jsonl" in proc.stderr
