"""Messages → one prompt string, for backends that take text (vLLM in-process, transformers, /v1/completions).

A model whose tokenizer carries a chat template is prompted with that template (it is what the model was
tuned on); otherwise ``jupiter.prompts.render_prompt`` with a named template. Both are deterministic, so a
path's prompt is byte-stable from one turn to the next and a prefix cache can reuse it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator

from jupiter.llm.types import PolicySpecError
from jupiter.prompts import CHATML, GEMMA, ChatTemplate, Message, render_prompt

__all__ = ["TEMPLATES", "END_OF_TURN_TOKENS", "template_by_name", "render_for_tokenizer", "end_of_turn_ids",
           "TemplateName", "ModelFolder"]

TEMPLATES: dict[str, ChatTemplate] = {GEMMA.name: GEMMA, CHATML.name: CHATML}
#: Special tokens that close a turn in the chat renderings we use (Gemma, ChatML).
END_OF_TURN_TOKENS = ("<end_of_turn>", "<|im_end|>")


def template_by_name(name: str) -> ChatTemplate:
    """The prompt template called ``name`` (``gemma`` or ``chatml``); the error lists the known names."""
    try:
        return TEMPLATES[name.lower()]
    except KeyError:
        raise PolicySpecError(f"unknown prompt template {name!r}; known: {', '.join(sorted(TEMPLATES))}") from None


def _known_template(name: str) -> str:
    template_by_name(name)
    return name


def _model_folder(path: Path) -> Path:
    if not (path / "config.json").is_file():
        raise ValueError(f"{path} is not a Hugging Face model folder (no config.json)")
    return path


#: Config field types of the backends: a known template's name; a Hugging Face model folder.
TemplateName = Annotated[str, AfterValidator(_known_template)]
ModelFolder = Annotated[Path, AfterValidator(_model_folder)]


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


def end_of_turn_ids(tokenizer: Any) -> list[int]:
    """Token ids that end a model turn: the tokenizer's EOS and the end-of-turn tokens of its vocabulary.

    Why: a model fine-tuned on chat-rendered samples (``jupiter sft``) ends its reply with the rendering's
    end-of-turn token, but a base model's EOS is another token (Gemma: ``<eos>``, not ``<end_of_turn>``). A
    backend that stopped only at EOS would let the model write the next turns itself; and the token is special,
    so it never shows in the text for a stop string to catch.
    """
    ids = {tokenizer.eos_token_id} if getattr(tokenizer, "eos_token_id", None) is not None else set()
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
    return sorted(ids)
