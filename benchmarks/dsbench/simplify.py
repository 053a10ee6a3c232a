"""Condensing a Kaggle competition page into a short modeling task, once per task and model (cached on disk).

DSBench's task texts are whole competition pages: prizes, timelines, rules and links around a few lines that
matter. Small models lose the thread in them, so before searching, the policy itself is asked to rewrite the
page as a concise task statement: the prediction target, the input files and their key columns, the metric,
and the exact layout of the submission file. The rewrite is cached under a key of (prompt version, model key,
page text), so a rerun or a resumed run makes no model call; an empty or unusable rewrite falls back to the
page text itself (cut to ``fallback_chars``) and is not cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

__all__ = ["SIMPLIFY_INSTRUCTIONS", "simplify_description", "PROMPT_VERSION"]

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
    return hashlib.sha256(f"{PROMPT_VERSION}\0{model_key}\0{text}".encode("utf-8")).hexdigest()[:24]


def simplify_description(
    text: str,
    policy: Any,
    cache_dir: str | Path,
    model_key: str = "",
    max_tokens: int = 512,
    fallback_chars: int = 6000,
) -> str:
    """The condensed task statement for competition ``text`` (one greedy policy call, or the cache).

    ``model_key`` names the model (e.g. the ``--llm`` spec) so that different models keep their own rewrites.
    Side effects: reads/writes ``cache_dir/<key>.json``.
    """
    from jupiter.llm import SamplingParams

    cache_dir = Path(cache_dir)
    path = cache_dir / f"{_cache_key(text, model_key)}.json"
    if path.is_file():
        try:
            return str(json.loads(path.read_text(encoding="utf-8"))["simplified"])
        except (json.JSONDecodeError, KeyError, OSError):
            log.warning("%s: unreadable cache entry, asking the model again", path)
    messages = [
        {"role": "system", "content": SIMPLIFY_INSTRUCTIONS},
        {"role": "user", "content": f"Competition page:\n\n{text.strip()}\n\nConcise task statement:"},
    ]
    params = SamplingParams(n=1, temperature=0.0, max_tokens=max_tokens, stop=("\n\n\n",))
    completion = policy.generate([messages], params)[0][0]
    simplified = (completion.text or "").strip()
    if len(simplified) < 40:
        log.warning("task simplification gave %d characters; using the original text", len(simplified))
        return text.strip()[:fallback_chars]
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"model": model_key, "prompt_version": PROMPT_VERSION, "simplified": simplified,
                               "original_chars": len(text)}, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return simplified
