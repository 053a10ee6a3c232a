"""Condensing a Kaggle competition page into a short modeling task, once per task and model (cached on disk).

DSBench's task texts are whole competition pages: prizes, timelines, rules and links around a few lines that
matter. Small models lose the thread in them, so before searching, the policy itself is asked (one batched call for all
tasks) to rewrite the page as a concise task statement: the prediction target, the input files and their key columns,
the metric, and the exact layout of the submission file. The rewrite is cached under a key of (prompt version, model
key, page text), so a rerun or a resumed run makes no model call; an empty or unusable rewrite falls back to the
page text itself (cut to ``fallback_chars``) and is not cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["SIMPLIFY_INSTRUCTIONS", "simplify_descriptions", "PROMPT_VERSION"]

log = logging.getLogger(__name__)

PROMPT_VERSION = "1"

SIMPLIFY_INSTRUCTIONS = (
    "You prepare machine-learning tasks for a data scientist who works in a Jupyter notebook. "
    "Below is the full text of a data-science competition page. Rewrite it as a short, self-contained task "
    "statement of at most 200 words. Keep only what is needed to build a model and write a valid submission: "
    "what must be predicted and from which data files, the important columns (identifier and target), the "
    "evaluation metric, and the exact columns and row order of the submission file. Leave out prizes, "
    "timelines, rules, acknowledgements and links. Write plain prose, no preamble."
)


def _cache_key(text: str, model_key: str) -> str:
    return hashlib.sha256(f"{PROMPT_VERSION}\0{model_key}\0{text}".encode()).hexdigest()[:24]


def _messages(text: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SIMPLIFY_INSTRUCTIONS},
        {"role": "user", "content": f"Competition page:\n\n{text.strip()}\n\nConcise task statement:"},
    ]


def _read_cache(path: Path) -> str | None:
    if not path.is_file():
        return None
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["simplified"])
    except (json.JSONDecodeError, KeyError, OSError):
        log.warning("%s: unreadable cache entry, asking the model again", path)
        return None


def simplify_descriptions(
    texts: Mapping[str, str],
    policy: Any,
    cache_dir: str | Path,
    model_key: str = "",
    max_tokens: int = 512,
    fallback_chars: int = 6000,
) -> dict[str, str]:
    """Condensed task statements for ``{name: competition text}``: cached ones from disk, the rest in ONE
    batched greedy policy call.

    ``model_key`` names the model (e.g. the ``--llm`` spec) so that different models keep their own rewrites.
    Side effects: reads/writes ``cache_dir/<key>.json``.
    """
    from jupiter.llm import SamplingParams

    cache_dir = Path(cache_dir)
    out: dict[str, str] = {}
    missing: list[tuple[str, Path]] = []
    for name, text in texts.items():
        path = cache_dir / f"{_cache_key(text, model_key)}.json"
        cached = _read_cache(path)
        if cached is not None:
            out[name] = cached
        else:
            missing.append((name, path))
    if missing:
        params = SamplingParams(n=1, temperature=0.0, max_tokens=max_tokens, stop=("\n\n\n",))
        outputs = policy.generate([_messages(texts[name]) for name, _ in missing], params)
        cache_dir.mkdir(parents=True, exist_ok=True)
        for (name, path), completions in zip(missing, outputs):
            simplified = (completions[0].text or "").strip() if completions else ""
            if len(simplified) < 40:
                log.warning("task %s: simplification gave %d characters; using the original text", name,
                            len(simplified))
                out[name] = texts[name].strip()[:fallback_chars]
                continue
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"task": name, "model": model_key, "prompt_version": PROMPT_VERSION,
                                       "simplified": simplified, "original_chars": len(texts[name])},
                                      ensure_ascii=False), encoding="utf-8")
            tmp.replace(path)
            out[name] = simplified
    return out
