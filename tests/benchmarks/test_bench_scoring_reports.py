"""DABench / AIME scoring of run records, accuracy curves, the resumable results log and the reports."""

from __future__ import annotations

import json

import pytest

from benchmarks.aime import aime_correct, aime_integer, aime_vote, load_aime, summarize_aime
from benchmarks.curves import accuracy_curves, value_pick, vote_pick
from benchmarks.dabench import dabench_correct, load_dabench, official_responses, summarize_dabench
from benchmarks.records import CandidateRecord, ResultsLog, TaskRecord
from benchmarks.report import compare_runs, format_table, write_report
from jupiter.answers import canonical_answer
from jupiter.task import TaskError


def cand(answer, iteration, value=0.0, tag=None):
    return CandidateRecord(tag or f"n{iteration}", answer, canonical_answer(answer), value, iteration)


def test_dabench_summary_hand_computed(bench_shared):
    data = load_dabench(bench_shared / "dabench", ids=["0", "5", "6"])
    assert [t.id for t in data.tasks] == ["0", "5", "6"] and data.tasks[0].files[0].is_file()
    records = [
        TaskRecord("0", "dabench", "@mean_fare[34.65]", candidates=(cand("@mean_fare[34.65]", 1),), iterations=2),
        # 2 of 4 sub-answers right
        TaskRecord("6", "dabench",
                   "@mean_fare_elderly[43.47] @mean_fare_teenager[31.98] @mean_fare_child[1] @mean_fare_adult[2]",
                   value_answer=None, iterations=3),
    ]  # id 5 unanswered
    summary = summarize_dabench(records, data)
    m = summary["metrics"]
    assert m["n"] == 2 and m["n_labels"] == 3
    assert m["abq"] == 0.5 and m["pasq"] == pytest.approx(0.75) and m["uasq"] == pytest.approx(0.6)
    assert m["abq_strict"] == pytest.approx(1 / 3)
    assert m["pasq_strict"] == pytest.approx((1 + 0 + 0.5) / 3)
    assert m["uasq_strict"] == pytest.approx(3 / 6)
    assert summary["abq_any_candidate_strict"] == pytest.approx(1 / 3)
    assert summary["iterations_mean"] == 2.5
    assert official_responses(records)[0] == {"id": 0, "response": "@mean_fare[34.65]"}
    assert dabench_correct("@mean_fare[34.6500000001]", data.label_for("0"))
    assert not dabench_correct("@mean_fare[34.66]", data.label_for("0"))


def test_the_summary_compares_value_time_per_node_with_the_policys(bench_shared):
    data = load_dabench(bench_shared / "dabench", ids=["0", "5"])
    records = [TaskRecord("0", "dabench", None, nodes=11, stats={"model_seconds": 6.0, "value_seconds": 1.0}),
               TaskRecord("5", "dabench", None, nodes=21, stats={"model_seconds": 12.0, "value_seconds": 2.0})]
    summary = summarize_dabench(records, data)
    assert summary["model_seconds_total"] == 18.0 and summary["value_seconds_total"] == 3.0
    assert summary["model_seconds_per_node"] == 0.6 and summary["value_seconds_per_node"] == 0.1  # 30 new nodes
    assert summary["value_to_model_time"] == pytest.approx(1 / 6, abs=1e-4)
    without = summarize_dabench([TaskRecord("0", "dabench", None, nodes=3)], data)
    assert without["value_seconds_total"] == 0.0 and without["value_to_model_time"] is None


def test_dabench_loader_errors(tmp_path, bench_shared):
    with pytest.raises(TaskError, match="not found"):
        load_dabench(tmp_path)
    with pytest.raises(TaskError, match="unknown question id"):
        load_dabench(bench_shared / "dabench", ids=["999999"])
    assert len(load_dabench(bench_shared / "dabench", limit=4).tasks) == 4


def test_aime_or_and_vote(bench_shared):
    tasks = load_aime(bench_shared / "aime2025")
    assert len(tasks) == 30 and tasks[0].label == "@answer[70]"
    assert aime_integer("so @answer[070]") == 70 and aime_integer("@answer[7.5]") is None
    assert aime_correct("@answer[ 70.0 ]", "@answer[70]")
    records = [
        # OR right, vote wrong (two votes for 5)
        TaskRecord("a", "aime2025", "@answer[5]", label="@answer[70]",
                   candidates=(cand("@answer[5]", 1), cand("@answer[70]", 2), cand("@answer[5]", 3))),
        # both right
        TaskRecord("b", "aime2025", "@answer[9]", label="@answer[9]",
                   candidates=(cand("@answer[9]", 1), cand("@answer[9]", 2), cand("@answer[1]", 3))),
        # nothing
        TaskRecord("c", "aime2025", None, label="@answer[1]"),
    ]
    assert aime_vote(records[0].candidates) == 5
    m = summarize_aime(records, total=4)["metrics"]
    assert m["or"] == pytest.approx(2 / 4) and m["vote"] == pytest.approx(1 / 4) and m["final"] == pytest.approx(1 / 4)


def test_curves_from_iteration_numbers():
    record = TaskRecord(
        "q", "aime2025", "@answer[1]", label="@answer[1]", iterations=4,
        candidates=(cand("@answer[2]", 1, value=0.9), cand("@answer[1]", 3, value=0.1),
                    cand("@answer[1]", 4, value=0.2)),
    )
    assert vote_pick(record.candidates).answer == "@answer[1]"
    assert value_pick(record.candidates).answer == "@answer[2]"
    curves = {c.name: c for c in accuracy_curves([record], lambda c, r: float(aime_correct(c.answer, r.label)))}
    assert curves["vote"].budgets == (1, 2, 3, 4)
    # budget 1,2: only the wrong candidate; 3: tie 1–1, broken by mean value (0.9 > 0.1) → wrong; 4: 2–1 → right
    assert curves["vote"].values == (0.0, 0.0, 0.0, 1.0)
    assert curves["oracle"].values == (0.0, 0.0, 1.0, 1.0)
    assert curves["value"].values == (0.0, 0.0, 0.0, 0.0)


def test_results_log_resumes_and_repairs_torn_line(tmp_path):
    path = tmp_path / "results.jsonl"
    log = ResultsLog(path)
    assert log.append(TaskRecord("1", "x", "@a[1]", candidates=(cand("@a[1]", 1),)))
    assert not log.append(TaskRecord("1", "x", "@a[2]"))  # already done
    with open(path, "a") as handle:
        handle.write('{"id": "2", "benchm')  # a crash mid-write
    again = ResultsLog(path)
    assert again.done_ids == {"1"}
    again.append(TaskRecord("3", "x", None, extra={"level": "easy"}))
    records = again.records()
    assert [r.id for r in records] == ["1", "3"]
    assert records[0].candidates[0].iteration == 1 and records[1].extra == {"level": "easy"}
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_report_files_and_compare(tmp_path):
    record = TaskRecord("q", "aime2025", "@answer[1]", label="@answer[1]", iterations=2,
                        candidates=(cand("@answer[1]", 2),), seconds=1.5)
    curves = accuracy_curves([record], lambda c, r: float(aime_correct(c.answer, r.label)))
    for name in ("run1", "run2"):
        summary = summarize_aime([record]) | {"run": {"llm": name}}
        paths = write_report(tmp_path / name, summary, curves)
        assert paths["plot"].read_bytes()[:4] == b"\x89PNG"
        assert "| OR | 1.0000 |" in paths["md"].read_text()
        assert json.loads(paths["json"].read_text())["curves"][0]["budgets"] == [1, 2]
    header, rows = compare_runs([tmp_path / "run1", tmp_path / "run2"], plot=tmp_path / "cmp.png")
    assert header[:4] == ["run", "benchmark", "OR", "Vote"] and rows[1][0] == "run2"
    assert (tmp_path / "cmp.png").is_file()
    assert "run1" in format_table(header, rows)
    with pytest.raises(FileNotFoundError, match="no run summary"):
        compare_runs([tmp_path / "missing"])
