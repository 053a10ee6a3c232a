"""What a local backend's model argument (``hf:X``, ``vllm:X``) points at, resolved to a loadable folder.

* ``default``: the embedded model as shipped, i.e. fine-tuned: the base with the repository's adapter merged
  in (``jupiter.default_model.ensure_finetuned_default_model``; the base, with a warning, when the checkout
  has no adapter);
* ``default-base``: the embedded base model, untouched;
* a LoRA adapter folder (it holds ``adapter_config.json``, as ``jupiter sft`` writes): merged into its base
  once, cached under ``<cache>/models/merged/<name>-<hash>`` keyed by the adapter's content hash, so a
  retrained adapter never reuses a stale merge; the base is the one the adapter records (``training.json``'s
  ``base``, else ``adapter_config.json``'s ``base_model_name_or_path``), ``default`` meaning the embedded model;
* anything else: returned as given (a Hugging Face folder; the backend checks it).

Why merge instead of loading base + adapter with peft: vLLM and an OpenAI-compatible server take a plain
folder, the merged model runs without LoRA overhead, and every backend then loads the same thing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from jupiter.llm.types import PolicySpecError
from jupiter.sft.merge import ADAPTER_CONFIG, is_adapter_dir

__all__ = ["DEFAULT", "DEFAULT_BASE", "ModelDirError", "is_adapter_dir", "adapter_base", "merged_dir_for",
           "ensure_merged", "resolve_model_dir"]

log = logging.getLogger(__name__)

DEFAULT = "default"
DEFAULT_BASE = "default-base"


class ModelDirError(PolicySpecError):
    """A model argument that names no loadable model; the message names the path."""


def adapter_base(adapter_dir: str | Path) -> Path:
    """The base model folder an adapter was trained on (``default`` → the cached embedded model)."""
    adapter_dir = Path(adapter_dir)
    recorded = None
    training = adapter_dir / "training.json"
    if training.is_file():
        try:
            recorded = json.loads(training.read_text(encoding="utf-8")).get("base")
        except ValueError:
            raise ModelDirError(f"{training} is not valid JSON") from None
    if not recorded:
        try:
            config = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        except ValueError:
            raise ModelDirError(f"{adapter_dir / ADAPTER_CONFIG} is not valid JSON") from None
        recorded = config.get("base_model_name_or_path")
    if not recorded or recorded in (DEFAULT, DEFAULT_BASE):
        from jupiter.default_model import ensure_default_model

        return ensure_default_model()
    base = Path(recorded).expanduser()
    if not base.is_absolute():
        base = (adapter_dir / base) if (adapter_dir / base / "config.json").is_file() else base
    if not (base / "config.json").is_file():
        raise ModelDirError(f"adapter {adapter_dir} was trained on {recorded}, which is not a Hugging Face model "
                            "folder here; merge it with: jupiter sft merge ADAPTER --base MODEL --out DIR")
    return base


def merged_dir_for(adapter_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """Where the merged model of an adapter is cached (the name carries the adapter's content hash)."""
    from jupiter.default_model import cache_root
    from jupiter.sft.merge import adapter_hash

    adapter_dir = Path(adapter_dir).resolve()
    name = f"{adapter_dir.name}-{adapter_hash(adapter_dir)[:16]}"
    return Path(cache_dir or cache_root()) / "models" / "merged" / name


def ensure_merged(adapter_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """The cached merged folder of an adapter, merging it first if needed (~10 s for Gemma 3 270M)."""
    from jupiter.sft.merge import MERGED_MARKER, MergeError, merge_adapter

    target = merged_dir_for(adapter_dir, cache_dir)
    if (target / MERGED_MARKER).is_file():
        return target

    log.warning("merging adapter %s into its base once; cached in %s", adapter_dir, target)
    try:
        return merge_adapter(adapter_dir, adapter_base(adapter_dir), target)
    except MergeError as exc:
        raise ModelDirError(str(exc)) from None


def resolve_model_dir(target: str) -> str:
    """A backend's model argument → a loadable Hugging Face folder (see the module docstring)."""
    from jupiter.default_model import ModelError, ensure_default_model, ensure_finetuned_default_model

    try:
        if target == DEFAULT:
            return str(ensure_finetuned_default_model())
        if target == DEFAULT_BASE:
            return str(ensure_default_model())
    except ModelError as exc:
        raise ModelDirError(str(exc)) from None
    path = Path(target).expanduser()
    if is_adapter_dir(path):
        return str(ensure_merged(path))
    return target
