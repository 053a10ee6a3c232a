"""Messages → one prompt string, for backends that take text (vLLM in-process, transformers, /v1/completions).

A model whose tokenizer carries a chat template is prompted with that template (it is what the model was
tuned on); otherwise ``jupiter.prompts.render_prompt`` with a named template. Both are deterministic, so a
path's prompt is byte-stable from one turn to the next and a prefix cache can reuse it.
"""

from __future__ import annotations

from typing import Any, Sequence

from jupiter.llm.types import PolicySpecError
from jupiter.prompts import CHATML, GEMMA, ChatTemplate, Message, render_prompt

__all__ = ["TEMPLATES", "template_by_name", "render_for_tokenizer"]

TEMPLATES: dict[str, ChatTemplate] = {GEMMA.name: GEMMA, CHATML.name: CHATML}


def template_by_name(name: str) -> ChatTemplate:
    """The prompt template called ``name`` (``gemma`` or ``chatml``); the error lists the known names."""
    try:
        return TEMPLATES[name.lower()]
    except KeyError:
        raise PolicySpecError(f"unknown prompt template {name!r}; known: {', '.join(sorted(TEMPLATES))}") from None


def render_for_tokenizer(messages: Sequence[Message], tokenizer: Any, template: ChatTemplate | None) -> str:
    """The prompt text for ``messages``.

    ``template`` given: always ``render_prompt`` with it. Else the tokenizer's own chat template when it has
    one, else the Gemma template. The BOS token is left out of the text because tokenizers add it (a BOS in
    the text would be doubled).
    """
    if template is None and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        bos = getattr(tokenizer, "bos_token", None)
        if bos and text.startswith(bos):
            text = text[len(bos):]
        return text
    return render_prompt(messages, template or GEMMA)
