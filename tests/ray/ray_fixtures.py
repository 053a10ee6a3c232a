"""Helpers of the Ray tests: NbQA tasks over real CSV files and a replay script that solves them.

Each task ``T<i>`` has its own CSV whose column ``x`` sums to ``10 * (i + 1)``; the scripted policy loads the
file and prints ``TOTAL <sum> END`` (right), guesses a wrong answer, or runs a cell that raises. A rule per task
turns ``TOTAL <sum> END`` into the right formatted answer, so every tree reaches reward +1 through real cells.
With ``cell_seconds`` every code cell first sleeps that long: a slow notebook, for a run that must still have
trees in flight seconds after its first tree finished (a tree of these scripts takes about a second otherwise).
"""

from __future__ import annotations

import json
from pathlib import Path

N_TASKS = 10


def step(thought: str, code: str) -> str:
    return f"Thought: {thought}\nAction:\n```python\n{code}\n```\n"


def write_tasks(folder: Path, n: int = N_TASKS) -> Path:
    """NbQA JSONL with labels (the paper's field names) plus one CSV per task; returns the JSONL path."""
    folder.mkdir(parents=True, exist_ok=True)
    records = []
    for i in range(n):
        total = 10 * (i + 1)
        values = [total - 3 * (i + 1), 3 * (i + 1)]
        (folder / f"data_{i}.csv").write_text("x,y\n" + "".join(f"{v},{k}\n" for k, v in enumerate(values)))
        records.append({"id": f"T{i}", "task": f"What is the sum of column x? [T{i}]", "file_names": [f"data_{i}.csv"],
                        "format": "@total[value]", "label": f"@total[{total}]", "concepts": ["Summary Statistics"]})
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_replay(folder: Path, n: int = N_TASKS, cell_seconds: float = 0.0) -> Path:
    pause = f"import time\ntime.sleep({cell_seconds})\n" if cell_seconds else ""
    load = step("Load the data and add up x.", pause + "import glob\nimport pandas as pd\n"
                "df = pd.read_csv(sorted(glob.glob('data_*.csv'))[0])\nprint('TOTAL', int(df['x'].sum()), 'END')")
    broken = step("Use the frame.", pause + "print(undefined_frame.head())")
    rules = [{"match": f"TOTAL {10 * (i + 1)} END", "replies": [f"Thought: the sum is printed.\nFormatted answer: "
                                                              f"@total[{10 * (i + 1)}]"]} for i in range(n)]
    rules.append({"match": "undefined_frame", "replies": [broken]})
    rules.append({"match": "Task:", "replies": [load, "Thought: I guess.\nFormatted answer: @total[7]", broken],
                  "logprobs": [-0.2, -1.0, -0.6]})
    path = folder / "replay.json"
    path.write_text(json.dumps({"rules": rules, "default": ["Thought: nothing to add."]}))
    return path
