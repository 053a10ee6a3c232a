"""The ``verify`` stage (beyond the paper): run each reconstructed solution in the sandbox and check that its
outputs reproduce the task's label.

Why: an LLM can rebuild a solution that looks right but does not compute the answer (or an answer copied
from a stale output). Running the steps on the task's own data files, in order, in one notebook state,
settles it. The flag is ``reproduced``; infrastructure failures (timeout, memory, a dead runtime) are
``status="infra_error"`` and do not count in the share. Data paths written in the steps
(``../Datasets/x.csv``) are rewritten to the plain names the sandbox shows the files under.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupiter.answers import extract_answers
from jupiter.config_model import ConfigModel, PositiveFloat
from nbqa_pipeline.jsonl import append_jsonl, finished_ids, read_jsonl

__all__ = ["VerifyConfig", "VerifyReport", "value_in_text", "rewrite_paths", "verify_task", "run_verify"]

log = logging.getLogger(__name__)

_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


class VerifyConfig(ConfigModel):
    timeout_s: PositiveFloat = 120.0  # per step: the cell timeout of the sandbox run_verify builds
    rel_tol: float = 1e-3
    splits: tuple[str, ...] = ("complete_low_randomness",)  # tasks whose data is complete
    backend: str = "fork"




@dataclass(frozen=True)
class VerifyReport:
    processed: int
    skipped: int
    outcomes: dict[str, int]
    reproduced_share: float | None


def value_in_text(value: str, text: str, rel_tol: float = 1e-3) -> bool:
    """Does ``text`` (the run's outputs) show ``value``? Numbers match after rounding to the value's
    decimals or within ``rel_tol``; other values match as case-insensitive substrings."""
    value = value.strip()
    try:
        target = float(value.replace(",", ""))
    except ValueError:
        target = None
    if target is None or math.isnan(target):
        squash = lambda s: re.sub(r"\s+", " ", s).strip().lower()  # noqa: E731
        return bool(value) and squash(value) in squash(text)
    decimals = len(value.split(".")[1]) if "." in value and "e" not in value.lower() else None
    for match in _NUMBER.findall(text):
        try:
            number = float(match)
        except ValueError:
            continue
        if decimals is not None and round(number, decimals) == round(target, decimals):
            return True
        if math.isclose(number, target, rel_tol=rel_tol, abs_tol=1e-9):
            return True
        if decimals is None and float(round(number)) == target and abs(number - target) < 0.5:
            return True
    return False


def rewrite_paths(code: str, names: Sequence[str]) -> str:
    """Replace string literals that end in a data file's name (``'../data/x.csv'``) with the plain name."""
    for name in names:
        pattern = re.compile(r"""(['"])([^'"\n]*[/\\])""" + re.escape(name) + r"\1")
        code = pattern.sub(lambda m, name=name: m.group(1) + name + m.group(1), code)
    return code


def verify_task(sandbox: Any, task: Mapping[str, Any], data_files: Sequence[Path],
                config: VerifyConfig = VerifyConfig()) -> dict[str, Any]:
    """Run ``task``'s steps in a fresh state of ``sandbox`` with ``data_files``; return the verify record."""
    record: dict[str, Any] = {"id": task["task_id"], "label": task.get("label")}
    missing = [str(p) for p in data_files if not Path(p).is_file()]
    if missing:
        return {**record, "status": "skipped", "reason": f"data files missing: {', '.join(missing)}"}
    names = [Path(p).name for p in data_files]
    state = sandbox.open_root(input_files=[Path(p) for p in data_files])
    texts, statuses = [], []
    try:
        for step in task.get("steps") or ():
            execution = state.run(rewrite_paths(step["python_code"], names))
            statuses.append(execution.status.value)
            texts.append(execution.observation(max_chars=200_000))
            if execution.status.is_infrastructure:
                return {**record, "status": "infra_error", "reason": execution.status.value, "step_status": statuses}
            if not execution.ok:
                break
    finally:
        state.close()
    output = "\n".join(texts)
    answers = extract_answers(task.get("label") or "")
    found = {name: value_in_text(value, output, config.rel_tol) for name, value in answers.items()}
    ran_ok = bool(statuses) and all(s in ("ok", "truncated") for s in statuses)
    return {**record, "status": "ran", "reproduced": bool(found) and ran_ok and all(found.values()),
            "found": found, "step_status": statuses, "output_tail": output[-2000:]}


def run_verify(extract_file: Path, root: Path, out_dir: Path, config: VerifyConfig = VerifyConfig(),
               sandbox_factory: Callable[[], Any] | None = None,
               progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it) -> VerifyReport:
    """Verify every ok task of the chosen splits not yet in ``out_dir/verify.jsonl``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "verify.jsonl"
    done = finished_ids(out_file)
    todo: list[tuple[dict[str, Any], list[Path]]] = []
    skipped = 0
    for nb in read_jsonl(extract_file):
        for task in nb.get("tasks", ()):
            if task.get("status") != "ok" or task.get("split") not in config.splits:
                continue
            if task["task_id"] in done:
                skipped += 1
                continue
            files = [Path(f["local"]) if f.get("local") else root / Path(nb["local_path"]).parent / f["path"]
                     for f in nb.get("data_files") or ()]
            todo.append((task, files))
    if sandbox_factory is None:
        from sandbox import Sandbox, SandboxConfig

        sandbox_factory = lambda: Sandbox(SandboxConfig(backend=config.backend, timeout_s=config.timeout_s))  # noqa: E731
    outcomes: Counter[str] = Counter()
    if todo:
        with sandbox_factory() as sandbox:
            for task, files in progress(todo):
                result = verify_task(sandbox, task, files, config)
                append_jsonl(out_file, result)
                outcomes[result["status"] if result["status"] != "ran" else
                         ("reproduced" if result["reproduced"] else "not_reproduced")] += 1
    ran = [r for r in read_jsonl(out_file) if r.get("status") == "ran"]
    share = round(sum(bool(r["reproduced"]) for r in ran) / len(ran), 4) if ran else None
    return VerifyReport(processed=len(todo), skipped=skipped, outcomes=dict(outcomes), reproduced_share=share)
