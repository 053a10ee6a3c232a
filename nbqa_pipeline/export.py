"""The ``export`` stage: NbQA JSONL (the paper's field names) and SFT data in LLaMA-Factory's ShareGPT layout.

Why the SFT chat is built with ``jupiter.prompts.build_messages``: a model fine-tuned on these samples must
see exactly the prompt the search will show it. The ShareGPT exporter checks what LLaMA-Factory requires —
human/gpt turns strictly alternating, starting with human and ending with gpt — merges consecutive turns
of one role, measures token lengths and, for a sample over the limit, drops it, keeps its longest prefix of
whole turns (``prefix``) or splits it into consecutive parts (``split``) — always counted in the report,
never silently. Each sample links back to its notebook and task.
"""

from __future__ import annotations

import enum
import logging
import re
import shutil
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from jupiter.config_model import ConfigModel
from jupiter.prompts import Turn, build_messages
from jupiter.task import Task, TaskError
from nbqa_pipeline.jsonl import read_jsonl, write_jsonl

__all__ = [
    "OverLength",
    "ExportConfig",
    "ExportReport",
    "nbqa_record",
    "task_of",
    "sharegpt_samples",
    "normalise_conversation",
    "ConversationError",
    "approx_tokens",
    "run_export",
]

log = logging.getLogger(__name__)

_ROLE = {"user": "human", "assistant": "gpt"}


class OverLength(str, enum.Enum):
    DROP = "drop"  # leave the sample out
    PREFIX = "prefix"  # keep the longest prefix of whole turns that fits and ends on an assistant turn
    SPLIT = "split"  # consecutive parts; later parts open with the task and a recap of the code already run


class ConversationError(ValueError):
    """A conversation cannot be put in strict human/gpt alternation."""


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate: words and punctuation marks (close to BPE counts on code and prose)."""
    return len(re.findall(r"\w+|[^\w\s]", text))


class ExportConfig(ConfigModel):
    max_tokens: int = Field(8192, strict=True, ge=16)  # per SFT sample, system included
    over_length: OverLength = OverLength.DROP
    splits: tuple[str, ...] = ("complete_low_randomness", "other")  # which task splits go to NbQA
    copy_data: bool = True  # copy each notebook's data files next to nbqa.jsonl (data/<key>/<name>)




@dataclass(frozen=True)
class ExportReport:
    nbqa_records: int
    sft_samples: int
    sft_dropped: dict[str, int]
    sft_prefixed: int
    sft_split: int
    merged_turns: int
    token_lengths: dict[str, float]
    splits: dict[str, int]
    verified: dict[str, int] = field(default_factory=dict)


def _key(notebook_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "__", notebook_id)[:150]


def nbqa_record(nb: Mapping[str, Any], task: Mapping[str, Any], verified: bool | None = None) -> dict[str, Any]:
    """One NbQA record: the paper's fields first, then ours (id, split, provenance, verification)."""
    files = nb.get("data_files") or []
    repo = nb.get("repo") or ""
    return {
        "task": task["task"],
        "file_names": list(task.get("file_names") or [f["name"] for f in files]),
        "answer": task.get("answer"),
        "concepts": list(task.get("concepts") or []),
        "difficulty": task.get("difficulty"),
        "constraints": task.get("constraints"),
        "format": task.get("format"),
        "label": task.get("label"),
        "solution": [dict(s) for s in task.get("steps") or []],
        "github_repo": f"https://github.com/{repo}" if repo else None,
        "ipynb_name": nb.get("path"),
        "data_files": [f.get("repo_path") or f.get("path") for f in files],
        "id": task["task_id"],
        "split": task.get("split"),
        "notebook_id": nb["id"],
        "license": nb.get("license"),
        "verified": verified,
        "label_in_outputs": task.get("label_in_outputs"),
        **{key: task[key] for key in ("final_thought", "program", "mistake") if key in task},
    }


def task_of(record: Mapping[str, Any]) -> Task:
    """The ``jupiter.task.Task`` of an NbQA record (file names only: SFT needs no files on disk)."""
    return Task(
        id=str(record["id"]), question=record["task"], constraints=record.get("constraints") or "",
        format=record.get("format") or "", files=tuple(Path(n) for n in record.get("file_names") or ()),
        label=record.get("label"), concepts=tuple(record.get("concepts") or ()), level=record.get("difficulty") or "",
    )


def _turns(record: Mapping[str, Any]) -> list[Turn]:
    turns = [Turn(thought=s.get("thought", ""), code=s.get("python_code"), observation=s.get("code_output") or "")
             for s in record.get("solution") or []]
    answer = record.get("label")
    final = record.get("final_thought") or "The steps above give the answer in the required format."
    turns.append(Turn(thought=final, answer=answer))
    return turns


def normalise_conversation(messages: Sequence[Mapping[str, str]]) -> tuple[str, list[dict[str, str]], int]:
    """(system, ShareGPT turns, merges): strict human/gpt alternation, consecutive same-role turns merged.

    Raises ConversationError when the chat does not start with a user turn or end with an assistant turn.
    """
    system_parts = [m["content"] for m in messages if m["role"] == "system"]
    turns: list[dict[str, str]] = []
    merges = 0
    for message in messages:
        if message["role"] == "system":
            continue
        if message["role"] not in _ROLE:
            raise ConversationError(f"unknown role {message['role']!r}")
        who = _ROLE[message["role"]]
        if turns and turns[-1]["from"] == who:
            turns[-1] = {"from": who, "value": turns[-1]["value"] + "\n\n" + message["content"]}
            merges += 1
        else:
            turns.append({"from": who, "value": message["content"]})
    if not turns or turns[0]["from"] != "human":
        raise ConversationError("the conversation must start with a human turn")
    if turns[-1]["from"] != "gpt":
        raise ConversationError("the conversation must end with a gpt turn")
    return "\n\n".join(system_parts), turns, merges


def _split_turns(turns: list[dict[str, str]], lengths: list[int], budget: int, recap: Callable[[int], str],
                 count: Callable[[str], int]) -> list[tuple[list[dict[str, str]], int]] | None:
    """Cut (human, gpt) pairs into consecutive parts that each fit ``budget`` tokens.

    A part after the first opens with the task message, a recap of the code already run (``recap(k)``: the
    code of the first k steps) and the observation that led to its first assistant turn. None when one pair
    alone does not fit.
    """
    pairs = [(i, i + 1) for i in range(0, len(turns), 2)]
    parts: list[tuple[list[dict[str, str]], int]] = []
    current: list[dict[str, str]] = []
    used = 0
    for number, (h, g) in enumerate(pairs):
        if current and used + lengths[h] + lengths[g] <= budget:
            current += [turns[h], turns[g]]
            used += lengths[h] + lengths[g]
            continue
        if current:
            parts.append((current, used))
        if number == 0:
            human, human_len = turns[0], lengths[0]
        else:
            value = f"{turns[0]['value']}\n\n{recap(number)}\n\n{turns[h]['value']}"
            human, human_len = {"from": "human", "value": value}, count(value)
        if human_len + lengths[g] > budget:
            return None
        current, used = [human, turns[g]], human_len + lengths[g]
    if current:
        parts.append((current, used))
    return parts


def sharegpt_samples(record: Mapping[str, Any], count: Callable[[str], int], config: ExportConfig
                     ) -> tuple[list[dict[str, Any]], str, int, int]:
    """(samples, outcome, tokens, merges) for one NbQA record.

    outcome: ``ok`` (one sample), ``prefix``/``split`` (over-length handled as configured) or a drop reason
    (``invalid_conversation``, ``over_length``) with no samples. ``tokens`` is the full conversation's length.
    """
    try:
        messages = build_messages(task_of(record), _turns(record))
        system, turns, merges = normalise_conversation(messages)
    except (TaskError, ConversationError) as exc:
        log.info("%s: not exported to SFT (%s)", record.get("id"), exc)
        return [], "invalid_conversation", 0, 0
    no_loss = _mistake_turns(record, turns, merges)
    lengths = [count(t["value"]) for t in turns]
    system_len = count(system)
    total = system_len + sum(lengths)
    budget = config.max_tokens - system_len
    if total <= config.max_tokens:
        return [_sample(record, system, turns, total, no_loss)], "ok", total, merges
    if config.over_length is OverLength.DROP:
        return [], "over_length", total, merges
    if config.over_length is OverLength.PREFIX:
        keep, used = 0, 0
        for index, length in enumerate(lengths):
            if used + length > budget:
                break
            used += length
            if turns[index]["from"] == "gpt":
                keep = index + 1
        if keep == 0:
            return [], "over_length", total, merges
        sample = _sample(record, system, turns[:keep], system_len + sum(lengths[:keep]), no_loss)
        sample["truncated_at_turn"] = keep
        return [sample], "prefix", total, merges
    steps = record.get("solution") or []

    def recap(k: int) -> str:
        code = "\n\n".join(f"```python\n{s.get('python_code', '')}\n```" for s in steps[:k])
        return f"Steps already run (outputs omitted):\n{code}"

    parts = _split_turns(turns, lengths, budget, recap, count)
    if not parts:
        return [], "over_length", total, merges
    samples = []
    for number, (part, used) in enumerate(parts, 1):
        sample = _sample(record, system, part, system_len + used, no_loss)
        sample["id"] = f"{record['id']}:part{number}"
        sample["part"], sample["parts"] = number, len(parts)
        samples.append(sample)
    return samples, "split" if len(samples) > 1 else "ok", total, merges


def _mistake_turns(record: Mapping[str, Any], turns: list[dict[str, str]], merges: int) -> set[int]:
    """``id()`` of the gpt turns that write a solution step marked ``"mistake": true`` (synthesized error-and-fix
    solutions): the k-th gpt turn is the k-th step when no turns were merged; none are marked otherwise."""
    steps = record.get("solution") or []
    if merges or not any(step.get("mistake") for step in steps):
        return set()
    gpt = [turn for turn in turns if turn["from"] == "gpt"]
    return {id(gpt[k]) for k, step in enumerate(steps) if step.get("mistake") and k < len(gpt)}


def _sample(record: Mapping[str, Any], system: str, turns: list[dict[str, str]], tokens: int,
            no_loss: set[int] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    """One ShareGPT row. ``no_loss_turns`` (only when some turn is a deliberate mistake) lists the indices in
    ``conversations`` of gpt turns that ``jupiter sft`` leaves out of the loss; LLaMA-Factory ignores the key
    and trains on every gpt turn."""
    sample: dict[str, Any] = {
        "conversations": turns,
        "system": system,
        "id": record["id"],
        "source": {"notebook": record.get("notebook_id"), "github_repo": record.get("github_repo"),
                   "ipynb_name": record.get("ipynb_name"), "task_id": record["id"]},
        "num_tokens": tokens,
    }
    marked = [index for index, turn in enumerate(turns) if id(turn) in no_loss]
    if marked:
        sample["no_loss_turns"] = marked
    return sample


def run_export(extract_file: Path, out_dir: Path, root: Path | None = None, verify_file: Path | None = None,
               config: ExportConfig = ExportConfig(), count: Callable[[str], int] = approx_tokens) -> ExportReport:
    """Write ``nbqa.jsonl``, ``sft_sharegpt.jsonl`` and ``dataset_info.json`` to ``out_dir``.

    Rewritten on every run (export is cheap and a pure function of the inputs).
    """
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    verified = {}
    if verify_file is not None:
        verified = {r["id"]: r.get("reproduced") for r in read_jsonl(verify_file) if r.get("status") == "ran"}
    nbqa, samples = [], []
    dropped: Counter[str] = Counter()
    prefixed = split = merges = 0
    lengths: list[int] = []
    for nb in read_jsonl(extract_file):
        if nb.get("status") != "ok":
            continue
        copied = False
        for task in nb.get("tasks", ()):
            if task.get("status") != "ok":
                continue
            record = nbqa_record(nb, task, verified.get(task["task_id"]))
            if task.get("split") in config.splits:
                if config.copy_data and root is not None and nb.get("data_files"):
                    record["data_dir"] = f"data/{_key(nb['id'])}"
                    if not copied:
                        _copy_data(nb, root, out_dir / record["data_dir"])
                        copied = True
                nbqa.append(record)
            made, outcome, _tokens, merged = sharegpt_samples(record, count, config)
            merges += merged
            if not made:
                dropped[outcome] += 1
                continue
            prefixed += outcome == "prefix"
            split += outcome == "split"
            lengths.extend(s["num_tokens"] for s in made)
            samples.extend(made)
    write_jsonl(out_dir / "nbqa.jsonl", nbqa)
    write_jsonl(out_dir / "sft_sharegpt.jsonl", samples)
    info = {"nbqa_sft": {"file_name": "sft_sharegpt.jsonl", "formatting": "sharegpt",
                         "columns": {"messages": "conversations", "system": "system"}}}
    (out_dir / "dataset_info.json").write_text(json.dumps(info, indent=2))
    lengths.sort()
    stats = {}
    if lengths:
        stats = {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1],
                 "mean": round(sum(lengths) / len(lengths), 1)}
    return ExportReport(
        nbqa_records=len(nbqa), sft_samples=len(samples), sft_dropped=dict(dropped), sft_prefixed=prefixed,
        sft_split=split,
        merged_turns=merges, token_lengths=stats, splits=dict(Counter(r["split"] for r in nbqa)),
        verified=dict(Counter(str(r["verified"]) for r in nbqa)),
    )


def _copy_data(nb: Mapping[str, Any], root: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for f in nb.get("data_files") or []:
        source = Path(f["local"]) if f.get("local") else root / Path(nb["local_path"]).parent / f["path"]
        if source.is_file():
            shutil.copy2(source, target / Path(f["path"]).name)
