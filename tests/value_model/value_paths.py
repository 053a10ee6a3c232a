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


#: Every kind in the data: high Q (correct answer 0.9, the answer's parent state 0.4) and low Q (last cell
#: errored −0.6, repeats itself −0.9).
LEARNABLE_KINDS = ("answer", "progress", "error", "repeat")


def learnable_samples(kinds: tuple[str, ...] = LEARNABLE_KINDS) -> list[Sample]:
    samples = []
    for record in load_records():
        if record["kind"] not in kinds:
            continue
        messages = record_messages(record)
        samples.append(Sample(messages=tuple(messages), text=render_prompt(messages, GEMMA), value=record["value"],
                              visits=1, value_sum=record["value"]))
    return samples
