"""The stored realistic paths (``data/paths.json``, real sandbox observations) as value-model samples."""

from __future__ import annotations

import json
from pathlib import Path

from jupiter.prompts import GEMMA, Turn, build_messages, render_prompt
from jupiter.task import Task
from value_model.extract import Sample

DATA = Path(__file__).resolve().parent / "data" / "paths.json"


def load_records() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def record_messages(record: dict) -> list[dict]:
    spec = record["task"]
    task = Task(id=spec["id"], question=spec["question"], format=spec["format"],
                files=tuple(Path("/data") / f for f in spec["files"]), label=spec["label"])
    turns = [Turn(thought=t["thought"], code=t.get("code"), observation=t.get("observation"), answer=t.get("answer"))
             for t in record["turns"]]
    return build_messages(task, turns)


def learnable_samples() -> list[Sample]:
    samples = []
    for record in load_records():
        messages = record_messages(record)
        samples.append(Sample(messages=tuple(messages), text=render_prompt(messages, GEMMA), value=record["value"],
                              visits=1, value_sum=record["value"]))
    return samples
