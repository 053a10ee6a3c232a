"""The ``extract`` stage: LLM calls that turn a filtered notebook into verified NbQA tasks.

Per notebook: markdown (nbconvert) → quality score (keep ≥ 3) → model classification (keep when it fits
no model or only classical ones) → tasks. Per task: constraints/format/label (plus a deterministic flag,
``label_in_outputs``: every label value appears in the notebook's own outputs) → solution rebuilt from the
notebook's cells → answer check (5 criteria) → constraint check (3 criteria). Every call gets three
attempts: a reply that is not the JSON we asked for is answered with what was wrong and asked again; after
the third, the input is dropped with a reason naming the stage. An endpoint that cannot answer at all is
an infrastructure failure: the notebook is not written, so a rerun tries it again.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import nbformat
from pydantic import Field

from jupiter.answers import ANSWER_PATTERN, extract_answers
from jupiter.config_model import ConfigModel, PositiveInt
from nbqa_pipeline import llm_prompts as P
from nbqa_pipeline.jsonl import append_jsonl, finished_ids, read_jsonl
from nbqa_pipeline.llm_client import ChatClient, LLMError
from nbqa_pipeline.verify import value_in_text

__all__ = [
    "ExtractConfig",
    "ExtractReport",
    "ReplyError",
    "StageFailure",
    "parse_json_reply",
    "ask_json",
    "notebook_markdown",
    "notebook_output_text",
    "randomness_level",
    "is_classical",
    "extract_notebook",
    "run_extract",
]

log = logging.getLogger(__name__)
T = TypeVar("T")


class ExtractConfig(ConfigModel):
    attempts: PositiveInt = 3  # per LLM call
    min_quality: int = Field(3, strict=True, ge=1, le=5)
    max_tasks: PositiveInt = 5  # asked per notebook
    max_label_chars: PositiveInt = 150
    max_answers: PositiveInt = 5
    max_markdown_chars: int = 30_000
    max_output_chars: int = 1_500  # per cell output in the markdown (head + tail)
    concurrency: PositiveInt = 4  # notebooks in flight




@dataclass(frozen=True)
class ExtractReport:
    processed: int
    skipped: int
    notebooks: dict[str, int]
    tasks: dict[str, int]
    splits: dict[str, int]
    usage: dict[str, Any] = field(default_factory=dict)


class ReplyError(ValueError):
    """A reply is not the JSON the stage asked for; the message says what is wrong (and goes back to the model)."""


class StageFailure(Exception):
    """A stage got no usable reply in all its attempts."""

    def __init__(self, stage: str, detail: str) -> None:
        super().__init__(f"{stage}: {detail}")
        self.stage = stage
        self.detail = detail


# ---------------------------------------------------------------------------------------- JSON replies

_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.S)


def parse_json_reply(text: str) -> dict[str, Any]:
    """The JSON object in a reply: the whole text, a fenced block, or the outermost ``{...}``."""
    candidates = [text.strip()]
    candidates += _FENCE.findall(text)
    if "{" in text and "}" in text:
        candidates.append(text[text.index("{"): text.rindex("}") + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    raise ReplyError("the reply holds no JSON object")


@dataclass
class _Meter:
    calls: int = 0
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def ask_json(client: ChatClient, messages: Sequence[Mapping[str, str]], validate: Callable[[dict[str, Any]], T],
             stage: str, attempts: int = 3, meter: _Meter | None = None) -> T:
    """Call the model until ``validate(parse_json_reply(reply))`` succeeds, at most ``attempts`` times.

    Raises StageFailure after the last attempt; LLMError (endpoint failure) passes through.
    """
    history = [dict(m) for m in messages]
    problem = ""
    for _ in range(attempts):
        reply = client.chat(history)
        if meter is not None:
            meter.attempts += 1
            meter.prompt_tokens += reply.prompt_tokens
            meter.completion_tokens += reply.completion_tokens
        try:
            if reply.finish_reason == "length":
                raise ReplyError("the reply was cut off by the token limit")
            value = validate(parse_json_reply(reply.text))
        except ReplyError as exc:
            problem = str(exc)
            history = [*history, {"role": "assistant", "content": reply.text}, P.retry_message(problem)]
            continue
        if meter is not None:
            meter.calls += 1
        return value
    raise StageFailure(stage, f"no usable reply in {attempts} attempts (last: {problem})")


# ------------------------------------------------------------------------------------------ validators


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ReplyError(f"'{key}' must be a non-empty string")
    return value.strip()


def _quality(data: dict[str, Any]) -> dict[str, Any]:
    score = data.get("score")
    if isinstance(score, str) and score.strip().isdigit():
        score = int(score.strip())
    if not isinstance(score, int) or isinstance(score, bool) or not 1 <= score <= 5:
        raise ReplyError("'score' must be an integer from 1 to 5")
    return {"score": score, "reason": str(data.get("reason", ""))}


def _models(data: dict[str, Any]) -> list[str]:
    models = data.get("models")
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        raise ReplyError("'models' must be a list of strings")
    return [m.strip() for m in models if m.strip()]


_DIFFICULTY = {"easy", "medium", "hard"}
_CONCEPTS = {c.lower(): c for c in P.CONCEPTS}


def _tasks(data: dict[str, Any]) -> list[dict[str, Any]]:
    tasks = data.get("tasks")
    if not isinstance(tasks, list):
        raise ReplyError("'tasks' must be a list")
    out = []
    for number, item in enumerate(tasks, 1):
        if not isinstance(item, dict):
            raise ReplyError(f"task {number} is not an object")
        concepts = item.get("concepts")
        if isinstance(concepts, str):
            concepts = [concepts]
        if not isinstance(concepts, list):
            raise ReplyError(f"task {number}: 'concepts' must be a list")
        known = [_CONCEPTS[c.strip().lower()] for c in concepts
                 if isinstance(c, str) and c.strip().lower() in _CONCEPTS]
        if not known:
            raise ReplyError(f"task {number}: 'concepts' must name at least one of: {', '.join(P.CONCEPTS)}")
        difficulty = str(item.get("difficulty", "")).strip().lower()
        if difficulty not in _DIFFICULTY:
            raise ReplyError(f"task {number}: 'difficulty' must be easy, medium or hard")
        answer = item.get("answer")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        out.append({"task": _text(item, "task"), "answer": _text({"answer": answer}, "answer"),
                    "concepts": known, "difficulty": difficulty})
    return out


def _label_checker(config: ExtractConfig) -> Callable[[dict[str, Any]], dict[str, str]]:
    def check(data: dict[str, Any]) -> dict[str, str]:
        constraints, fmt, label = _text(data, "constraints"), _text(data, "format"), _text(data, "label")
        _check_label(label, config)
        missing = [n for n in extract_answers(label) if f"@{n}[" not in fmt]
        if missing:
            raise ReplyError(f"the format does not describe @{missing[0]}[...] from the label")
        return {"constraints": constraints, "format": fmt, "label": label}

    return check


def _check_label(label: str, config: ExtractConfig) -> None:
    answers = ANSWER_PATTERN.findall(label)
    if not answers:
        raise ReplyError("the label has no @name[value] part")
    if len(answers) > config.max_answers:
        raise ReplyError(f"the label has {len(answers)} answers; at most {config.max_answers}")
    if len(label) > config.max_label_chars:
        raise ReplyError(f"the label has {len(label)} characters; at most {config.max_label_chars}")


def _solution_checker(config: ExtractConfig) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def check(data: dict[str, Any]) -> dict[str, Any]:
        steps = data.get("steps")
        if not isinstance(steps, list) or not steps:
            raise ReplyError("'steps' must be a non-empty list")
        out = []
        for number, step in enumerate(steps, 1):
            if not isinstance(step, dict):
                raise ReplyError(f"step {number} is not an object")
            code = step.get("python_code")
            if not isinstance(code, str) or not code.strip():
                raise ReplyError(f"step {number}: 'python_code' must be non-empty code")
            out.append({"thought": str(step.get("thought", "")).strip(), "python_code": code.strip("\n"),
                        "code_output": str(step.get("code_output", "") or "")})
        final = _text(data, "final_label")
        _check_label(final, config)
        return {"steps": out, "final_label": final}

    return check


def _criteria_checker(criteria: Sequence[tuple[str, str]]) -> Callable[[dict[str, Any]], dict[str, bool]]:
    def check(data: dict[str, Any]) -> dict[str, bool]:
        checks = data.get("checks")
        if not isinstance(checks, dict):
            raise ReplyError("'checks' must be an object")
        out = {}
        for key, _ in criteria:
            value = checks.get(key)
            if isinstance(value, bool):
                out[key] = value
            elif isinstance(value, str) and value.strip().lower() in {"yes", "no"}:
                out[key] = value.strip().lower() == "yes"
            else:
                raise ReplyError(f"checks.{key} must be 'yes' or 'no'")
        return out

    return check


# ------------------------------------------------------------------------------------------- helpers

_ALIASES = {
    "svm": "support vector machine", "svc": "support vector machine", "svr": "support vector machine",
    "linearsvc": "support vector machine", "knn": "k-nearest neighbors", "kneighbors": "k-nearest neighbors",
    "pca": "principal component analysis", "lda": "linear discriminant analysis", "kmeans": "k-means",
    "ols": "linear regression", "gbm": "gradient boosting", "xgb": "xgboost", "lgbm": "lightgbm",
    "agglomerative": "hierarchical clustering", "gaussiannb": "naive bayes", "multinomialnb": "naive bayes",
    "bernoullinb": "naive bayes", "sarima": "arima", "sarimax": "arima", "elasticnet": "elastic net",
}


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", name.lower()).strip()


def is_classical(model: str) -> bool:
    """True when ``model`` names one of the 21 classical model families (aliases and sklearn names too)."""
    norm = _norm(model)
    squashed = norm.replace(" ", "")
    families = [_norm(m) for m in P.CLASSICAL_MODELS]
    if any(token in _ALIASES for token in norm.split()) or squashed.startswith(tuple(_ALIASES)):
        return True
    for family in families:
        fam = family.replace(" ", "")
        if family in norm or fam in squashed:
            return True
        head = family.replace(" regression", "").replace(" ", "")
        if squashed.startswith(head) and head not in {"linear", "polynomial"}:
            return True
    return False


_RANDOM_CALL = re.compile(
    r"np\.random\.|\brandom\.|train_test_split|\.sample\(|shuffle|KMeans|RandomForest|GradientBoosting|"
    r"XGB|LGBM|KFold|cross_val|GridSearchCV|RandomizedSearchCV|bootstrap|MLP|DBSCAN|AdaBoost|Bagging|TSNE"
)
_SEEDED = re.compile(r"random_state\s*=\s*\d|\.seed\(|seed\s*=\s*\d|RandomState\(\s*\d")


def randomness_level(code: str) -> str:
    """``"low"`` when the code's results do not depend on unseeded randomness, else ``"high"``."""
    if not _RANDOM_CALL.search(code):
        return "low"
    return "low" if _SEEDED.search(code) else "high"


def notebook_markdown(path: Path, max_chars: int = 30_000, max_output_chars: int = 1_500) -> str:
    """The notebook as markdown (nbconvert), images dropped and long outputs cut to head + tail."""
    from nbconvert import MarkdownExporter

    node = nbformat.read(str(path), as_version=4)  # our own copy: edited in place below
    for cell in node.cells:
        if cell.get("cell_type") != "code":
            continue
        kept = []
        for output in cell.get("outputs", []):
            data = output.get("data")
            if data is not None:
                text = data.get("text/plain")
                if text is None:
                    continue  # images and HTML-only displays carry nothing the model can read here
                output["data"] = {"text/plain": text}
                output["metadata"] = {}
            kept.append(output)
        cell["outputs"] = kept
        for output in kept:
            for key, value in list(_output_texts(output)):
                if len(value) > max_output_chars:
                    half = max_output_chars // 2
                    cut = len(value) - 2 * half
                    _set_output_text(output, key,
                                     f"{value[:half]}\n... [{cut} characters omitted] ...\n{value[-half:]}")
    body, _ = MarkdownExporter().from_notebook_node(node)
    if len(body) > max_chars:
        half = max_chars // 2
        body = f"{body[:half]}\n\n... [{len(body) - 2 * half} characters omitted] ...\n\n{body[-half:]}"
    return body


def _output_texts(output: dict[str, Any]) -> Iterable[tuple[str, str]]:
    if output.get("output_type") == "stream":
        text = output.get("text", "")
        yield "text", "".join(text) if isinstance(text, list) else text
    elif "data" in output:
        text = output["data"].get("text/plain", "")
        yield "text/plain", "".join(text) if isinstance(text, list) else text


def _set_output_text(output: dict[str, Any], key: str, value: str) -> None:
    if key == "text":
        output["text"] = value
    else:
        output["data"]["text/plain"] = value


# ------------------------------------------------------------------------------------------ pipeline


def notebook_output_text(path: Path) -> str:
    """All text the notebook's cells printed or displayed (streams and ``text/plain``), in order."""
    node = nbformat.read(str(path), as_version=4)
    parts = []
    for cell in node.cells:
        for output in cell.get("outputs", ()) if cell.get("cell_type") == "code" else ():
            for _, text in _output_texts(output):
                parts.append(text)
    return "\n".join(parts)


def _present_files(record: Mapping[str, Any], root: Path) -> list[dict[str, str]]:
    notebook = root / record["local_path"]
    files = []
    for f in record.get("data_files", ()):
        if f.get("is_url") or not f.get("exists", f.get("status") == "present"):
            continue
        local = (notebook.parent / f["path"]).resolve()
        files.append({"path": f["path"], "repo_path": f.get("repo_path") or f["path"], "local": str(local),
                      "name": Path(f["path"]).name})
    return files


def extract_notebook(client: ChatClient, record: Mapping[str, Any], root: Path,
                     config: ExtractConfig = ExtractConfig()) -> dict[str, Any]:
    """All LLM stages for one filtered notebook record; returns the output record (``status`` ok/dropped).

    Raises LLMError when the endpoint fails (the caller leaves the notebook for a rerun).
    """
    meter = _Meter()
    out: dict[str, Any] = {"id": record["id"], "repo": record.get("repo"), "path": record.get("path"),
                           "local_path": record.get("local_path"), "license": record.get("license"),
                           "data_complete": bool(record.get("data_complete", record.get("verdict") == "keep")),
                           "sft_only": bool(record.get("sft_only")), "tasks": []}

    def finish(status: str, reason: str | None = None, stage: str | None = None) -> dict[str, Any]:
        out.update(status=status, reason=reason, stage=stage, usage=asdict(meter))
        return out

    try:
        md = notebook_markdown(root / record["local_path"], config.max_markdown_chars, config.max_output_chars)
        outputs = notebook_output_text(root / record["local_path"])
    except Exception as exc:  # nbconvert/nbformat raise many types on odd notebooks
        return finish("dropped", f"markdown_failed: {type(exc).__name__}: {exc}", "markdown")
    files = _present_files(record, root)
    out["data_files"] = files
    ask = lambda msgs, check, stage: ask_json(client, msgs, check, stage, config.attempts, meter)  # noqa: E731
    try:
        quality = ask(P.quality_messages(md), _quality, "quality")
        out["quality"] = quality
        if quality["score"] < config.min_quality:
            return finish("dropped", "low_quality", "quality")
        models = ask(P.models_messages(md), _models, "models")
        out["models"] = models
        if any(not is_classical(m) for m in models):
            return finish("dropped", "non_classical_model", "models")
        tasks = ask(P.tasks_messages(md, [f["name"] for f in files], config.max_tasks), _tasks, "tasks")
    except StageFailure as exc:
        return finish("dropped", f"{exc.stage}_unusable", exc.stage)
    if not tasks:
        return finish("dropped", "no_tasks", "tasks")
    for number, task in enumerate(tasks[: config.max_tasks]):
        out["tasks"].append(_extract_task(client, md, outputs, task, number, out, files, config, meter))
    kept = sum(t["status"] == "ok" for t in out["tasks"])
    return finish("ok" if kept else "dropped", None if kept else "no_task_survived", None if kept else "tasks")


def _extract_task(client: ChatClient, md: str, outputs: str, task: dict[str, Any], number: int, nb: Mapping[str, Any],
                  files: list[dict[str, str]], config: ExtractConfig, meter: _Meter) -> dict[str, Any]:
    item: dict[str, Any] = {"task_id": f"{nb['id']}#{number}", **task, "file_names": [f["name"] for f in files]}
    ask = lambda msgs, check, stage: ask_json(client, msgs, check, stage, config.attempts, meter)  # noqa: E731
    try:
        item.update(ask(P.constraints_messages(md, item), _label_checker(config), "constraints"))
        # a deterministic check beside the LLM's: does the notebook itself show every label value?
        item["label_in_outputs"] = all(value_in_text(v, outputs) for v in extract_answers(item["label"]).values())
        solution = ask(P.solution_messages(md, item), _solution_checker(config), "solution")
        item["steps"], item["final_label"] = solution["steps"], solution["final_label"]
        item["answer_checks"] = ask(P.answer_check_messages(md, item), _criteria_checker(P.ANSWER_CRITERIA),
                                    "answer_check")
        if not all(item["answer_checks"].values()):
            return {**item, "status": "dropped", "reason": "answer_check_failed"}
        item["constraint_checks"] = ask(P.constraint_check_messages(md, item),
                                        _criteria_checker(P.CONSTRAINT_CRITERIA), "constraint_check")
        if not all(item["constraint_checks"].values()):
            return {**item, "status": "dropped", "reason": "constraint_check_failed"}
    except StageFailure as exc:
        return {**item, "status": "dropped", "reason": f"{exc.stage}_unusable"}
    code = "\n".join(s["python_code"] for s in item["steps"])
    item["randomness"] = randomness_level(code)
    complete = bool(nb.get("data_complete")) and bool(files)
    item["split"] = "complete_low_randomness" if complete and item["randomness"] == "low" else "other"
    return {**item, "status": "ok", "reason": None}


def run_extract(records: Iterable[Mapping[str, Any]], root: Path, out_dir: Path, client: ChatClient,
                config: ExtractConfig = ExtractConfig(),
                progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it) -> ExtractReport:
    """Extract tasks from every record not yet in ``out_dir/extract.jsonl``, ``config.concurrency`` at a time."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "extract.jsonl"
    done = finished_ids(out_file)
    records = list(records)
    todo = [r for r in records if str(r["id"]) not in done]
    outcomes: Counter[str] = Counter()
    with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
        futures = {pool.submit(extract_notebook, client, r, root, config): r for r in todo}
        for future in progress(as_completed(futures)):
            record = futures[future]
            try:
                result = future.result()
            except LLMError as exc:
                log.warning("%s: LLM endpoint failed (%s); left for a rerun", record["id"], exc)
                outcomes["llm_error"] += 1
                continue
            append_jsonl(out_file, result)  # only this thread appends: the workers return their results
            outcomes[result["status"] if result["status"] == "ok" else f"dropped:{result['reason']}"] += 1
    all_records = list(read_jsonl(out_file))
    tasks = Counter(t["status"] if t["status"] == "ok" else f"dropped:{t['reason']}"
                    for r in all_records for t in r.get("tasks", ()))
    splits = Counter(t["split"] for r in all_records for t in r.get("tasks", ()) if t["status"] == "ok")
    return ExtractReport(
        processed=len(todo) - outcomes["llm_error"], skipped=len(records) - len(todo), notebooks=dict(outcomes),
        tasks=dict(tasks), splits=dict(splits),
        usage=asdict(client.usage()),
    )
