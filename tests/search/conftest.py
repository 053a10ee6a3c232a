"""Fixtures of the search tests: the real sandbox and DABench tasks with scripted (replay) solutions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from search_dabench import SOLUTIONS

from jupiter.task import Task, task_from_dabench


@pytest.fixture(scope="session")
def dabench_tasks(dabench_dir: Path) -> dict[int, Task]:
    """The DABench questions above as tasks (question text tagged so one replay script can serve them all)."""
    questions = {}
    for path, key in ((dabench_dir / "da-dev-questions.jsonl", "q"), (dabench_dir / "da-dev-labels.jsonl", "l")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["id"] in SOLUTIONS:
                questions.setdefault(record["id"], {})[key] = record
    tasks = {}
    for qid, parts in questions.items():
        question = dict(parts["q"], question=f"{parts['q']['question']} [DABENCH-{qid}]")
        tasks[qid] = task_from_dabench(question, parts["l"], [dabench_dir / "tables"]).with_files_checked()
    return tasks


@pytest.fixture(scope="module")
def sandbox():
    from sandbox import Sandbox, SandboxConfig

    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        yield box
