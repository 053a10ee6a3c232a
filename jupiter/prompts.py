"""The ReAct notebook prompt, the one message builder, and the one reply parser.

Every part of Jupiter that shows a notebook path to a model — the search engine, the baselines, the SFT
exporter, value-model training and scoring — builds the chat with ``build_messages`` and parses replies with
``parse_reply``. Keeping them here is what makes a trained value model see at scoring time exactly the text it
saw in training, and makes prompts byte-stable across turns (which is what lets a server's prefix cache work).

The contract with the model: every turn is ``Thought:`` then ``Action:`` with exactly one python block; the
code's output comes back as a user turn ``Observation:\\n...``; the last turn is ``Thought:`` then
``Formatted answer:`` in the task's answer format.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jupiter.task import Task, TaskKind

__all__ = [
    "Message",
    "Turn",
    "ReplyStatus",
    "ParsedReply",
    "ChatTemplate",
    "GEMMA",
    "CHATML",
    "SYSTEM_PROMPT",
    "OBSERVATION_PREFIX",
    "STOP_SEQUENCES",
    "system_prompt",
    "task_prompt",
    "build_messages",
    "render_assistant",
    "render_observation",
    "parse_reply",
    "render_prompt",
]

Message = dict[str, Any]  # {"role": "system" | "user" | "assistant", "content": str}

OBSERVATION_PREFIX = "Observation:"
#: Generation stops where the model would start writing the code's output itself.
STOP_SEQUENCES: tuple[str, ...] = (OBSERVATION_PREFIX,)

SYSTEM_PROMPT = """\
You are an expert data analyst who solves tasks by writing and running Python in a Jupyter notebook.

Work in steps. In every step write exactly this:
Thought: what you will do next and why
Action:
```python
# one block of Python code
```
The notebook runs your code and shows you what it printed as "Observation:". Never write an Observation \
yourself: stop after the code block and wait for it.

Rules:
- Variables, imports and files persist from one step to the next, as in a notebook.
- Use print() for every value you want to see.
- The data files are in the current working directory; save any file you create to ./
- Keep each step small, and read the output before you go on.

When you know the answer, write your final step as:
Thought: why the answer is correct
Formatted answer: the answer, written exactly in the required format"""

MATH_SYSTEM_PROMPT = SYSTEM_PROMPT.replace(
    "You are an expert data analyst who solves tasks by writing and running Python in a Jupyter notebook.",
    "You are an expert mathematician who solves problems by reasoning and by running Python in a Jupyter "
    "notebook to compute and check each step.",
)


def system_prompt(task: Task) -> str:
    """The system turn for a task (math tasks get a mathematician's opening, same contract)."""
    return MATH_SYSTEM_PROMPT if task.kind is TaskKind.MATH else SYSTEM_PROMPT


def task_prompt(task: Task) -> str:
    """The first user turn: question, constraints, answer format and data files."""
    parts = [f"Task: {task.question.strip()}"]
    if task.constraints.strip():
        parts.append(f"Constraints: {task.constraints.strip()}")
    if task.format.strip():
        parts.append(f"Answer format: {task.format.strip()}")
    if task.files:
        parts.append("Data files: " + ", ".join(task.file_names))
    if task.setup.strip():
        parts.append("Setup cell, already run in this notebook (its variables exist):\n"
                     f"```python\n{task.setup.strip()}\n```")
        if task.setup_output:
            parts.append(f"Setup output:\n{task.setup_output.strip()}")
    return "\n".join(parts)


@dataclass(frozen=True)
class Turn:
    """One step of a path: the model's thought and code (or final answer) and the code's observation."""

    thought: str = ""
    code: str | None = None
    observation: str | None = None
    answer: str | None = None


class ReplyStatus(str, enum.Enum):
    """What a model reply is, after parsing."""

    ANSWER = "answer"  # a Formatted answer: the branch ends here
    CODE = "code"  # a python block to run
    NO_CODE = "no-code"  # text but neither code nor an answer
    EMPTY_CODE = "empty-code"  # a python block with nothing in it
    UNPARSABLE = "unparsable"  # nothing usable (empty reply)


@dataclass(frozen=True)
class ParsedReply:
    thought: str
    code: str | None
    answer: str | None
    status: ReplyStatus

    def to_turn(self, observation: str | None = None) -> Turn:
        return Turn(thought=self.thought, code=self.code, observation=observation, answer=self.answer)


_CODE_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3|ipython)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"Formatted answer\s*:", re.IGNORECASE)
_THOUGHT = re.compile(r"Thought\s*:", re.IGNORECASE)
_ACTION = re.compile(r"^\s*Action\s*:?\s*$", re.IGNORECASE | re.MULTILINE)


def parse_reply(text: str) -> ParsedReply:
    """Parse one model reply.

    Text from a hallucinated ``Observation:`` on is ignored. A ``Formatted answer:`` counts only when no
    code block comes before it (a reply that runs code has not seen its output yet, so an answer after the
    code is a guess). The first python block is the code; an unclosed block at the end is taken as code.
    """
    text = text or ""
    cut = text.find(OBSERVATION_PREFIX)
    if cut >= 0:
        text = text[:cut]
    if not text.strip():
        return ParsedReply("", None, None, ReplyStatus.UNPARSABLE)
    block = _CODE_BLOCK.search(text)
    answer = _ANSWER.search(text)
    if answer and (block is None or answer.start() < block.start()):
        return ParsedReply(_thought(text[: answer.start()]), None, text[answer.end():].strip(), ReplyStatus.ANSWER)
    if block is None:
        return ParsedReply(_thought(text), None, None, ReplyStatus.NO_CODE)
    code = block.group(1).strip("\n")
    thought = _thought(text[: block.start()])
    if not code.strip():
        return ParsedReply(thought, "", None, ReplyStatus.EMPTY_CODE)
    return ParsedReply(thought, code, None, ReplyStatus.CODE)


def _thought(text: str) -> str:
    marker = _THOUGHT.search(text)
    if marker:
        text = text[marker.end():]
    return _ACTION.sub("", text).strip()


def render_assistant(turn: Turn | ParsedReply) -> str:
    """How an assistant step is written into the history (canonical, so prompts stay byte-stable)."""
    thought = turn.thought.strip()
    if turn.answer is not None:
        return f"Thought: {thought}\nFormatted answer: {turn.answer.strip()}"
    code = (turn.code or "").strip("\n")
    return f"Thought: {thought}\nAction:\n```python\n{code}\n```"


def render_observation(observation: str) -> str:
    return f"{OBSERVATION_PREFIX}\n{observation}"


def build_messages(task: Task, turns: Sequence[Turn] = ()) -> list[Message]:
    """The chat for a path of turns: system, task, then (assistant step, observation) pairs.

    A turn without an observation (a final answer, or a step not yet run) adds only its assistant message.
    """
    messages: list[Message] = [
        {"role": "system", "content": system_prompt(task)},
        {"role": "user", "content": task_prompt(task)},
    ]
    for turn in turns:
        messages.append({"role": "assistant", "content": render_assistant(turn)})
        if turn.observation is not None:
            messages.append({"role": "user", "content": render_observation(turn.observation)})
    return messages


# ------------------------------------------------------------------------------------------ templates


@dataclass(frozen=True)
class ChatTemplate:
    """A plain-text chat format for completion-style backends (models served without a chat endpoint).

    ``system_in_user``: the model family has no system role, so the system text opens the first user turn.
    """

    name: str
    turn_start: str  # format string with {role}
    turn_end: str
    roles: tuple[tuple[str, str], ...]  # our role → the template's role name
    system_in_user: bool

    def role(self, role: str) -> str:
        return dict(self.roles).get(role, role)


GEMMA = ChatTemplate(
    name="gemma",
    turn_start="<start_of_turn>{role}\n",
    turn_end="<end_of_turn>\n",
    roles=(("user", "user"), ("assistant", "model"), ("system", "user")),
    system_in_user=True,
)

CHATML = ChatTemplate(
    name="chatml",
    turn_start="<|im_start|>{role}\n",
    turn_end="<|im_end|>\n",
    roles=(("user", "user"), ("assistant", "assistant"), ("system", "system")),
    system_in_user=False,
)


def render_prompt(messages: Sequence[Message], template: ChatTemplate = GEMMA) -> str:
    """Messages → one prompt string ending with the assistant's turn opener (the model continues from it).

    The BOS token is not included: tokenizers add it.
    """
    items = [dict(m) for m in messages]
    if template.system_in_user and items and items[0]["role"] == "system":
        system = items.pop(0)["content"]
        if items and items[0]["role"] == "user":
            items[0]["content"] = f"{system}\n\n{items[0]['content']}"
        else:
            items.insert(0, {"role": "user", "content": system})
    parts: list[str] = []
    for message in items:
        parts.append(template.turn_start.format(role=template.role(message["role"])))
        parts.append(message["content"])
        parts.append(template.turn_end)
    parts.append(template.turn_start.format(role=template.role("assistant")))
    return "".join(parts)
