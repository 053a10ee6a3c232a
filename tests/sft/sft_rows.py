"""ShareGPT rows for the SFT tests, built the way the exporter builds them.

``sharegpt_row``: from ``jupiter.prompts.build_messages`` (the prompt the search shows the model) put into
ShareGPT form by ``nbqa_pipeline.export.normalise_conversation`` (what ``jupiter nbqa export`` writes), so the
tests train on exactly the layout of the real data. ``short_rows``: tiny rows with a one-line system prompt, so
a training step takes about a second.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from jupiter.prompts import Turn, build_messages
from jupiter.task import Task
from nbqa_pipeline.export import normalise_conversation


def sharegpt_row(index: int, rng: random.Random, table_rows: int = 5) -> dict:
    """One multi-step sample: inspect a table, compute a mean, answer."""
    column = rng.choice(["price", "height", "score", "weight"])
    values = [round(rng.uniform(1, 100), 2) for _ in range(table_rows)]
    table = "\n".join(f"{i}  {v}" for i, v in enumerate(values))
    mean = round(sum(values) / len(values), 2)
    task = Task(id=f"t{index}", question=f"What is the mean {column} in data.csv?",
                constraints="Round to two decimals.", format="@mean[value]", files=(Path("data.csv"),))
    turns = [
        Turn(thought="Look at the data first.",
             code="import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df.head())",
             observation=f"   {column}\n{table}"),
        Turn(thought="Compute the mean.", code=f"print(round(df['{column}'].mean(), 2))", observation=str(mean)),
        Turn(thought="The mean is printed above.", answer=f"@mean[{mean}]"),
    ]
    system, conversations, _ = normalise_conversation(build_messages(task, turns))
    return {"conversations": conversations, "system": system, "id": f"t{index}"}


def write_rows(path: Path, count: int, seed: int = 0, table_rows: int = 5) -> Path:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for index in range(count):
            handle.write(json.dumps(sharegpt_row(index, rng, table_rows)) + "\n")
    return path


def short_rows(path: Path, count: int) -> Path:
    """Short ShareGPT rows (a small system prompt), so that a training step takes about a second."""
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(count):
            row = {"system": "You analyse data with Python.", "id": f"s{i}", "conversations": [
                {"from": "human", "value": f"Task: what is {i} + {i}?"},
                {"from": "gpt", "value": f"Thought: add them.\nAction:\n```python\nprint({i} + {i})\n```"},
                {"from": "human", "value": f"Observation:\n{2 * i}"},
                {"from": "gpt", "value": f"Thought: printed above.\nFormatted answer: @sum[{2 * i}]"}]}
            handle.write(json.dumps(row) + "\n")
    return path


TINY = ["--max-steps", "2", "--batch-size", "1", "--micro-batch-size", "1", "--lora-r", "4", "--lora-alpha", "8",
        "--max-len", "64", "--lr", "1e-3", "--seed", "3"]
