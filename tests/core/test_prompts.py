"""The one prompt builder and the one reply parser."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jupiter.prompts import (
    CHATML,
    GEMMA,
    ReplyStatus,
    Turn,
    build_messages,
    parse_reply,
    render_assistant,
    render_prompt,
)
from jupiter.task import Task

TASK = Task(id="t", question="Mean fare?", constraints="2 decimals", format="@mean_fare[value]", label="@mean_fare[1]")


def test_task_turn_shows_the_setup_cell_and_its_output():
    plain = build_messages(TASK)[1]["content"]
    assert "Setup" not in plain
    task = TASK.replace(setup="import pandas as pd\ndf = pd.read_csv('t.csv')", setup_output="(891, 12)")
    text = build_messages(task)[1]["content"]
    assert text.startswith(plain)
    assert text.endswith("```python\nimport pandas as pd\ndf = pd.read_csv('t.csv')\n```\nSetup output:\n(891, 12)")


def test_code_reply():
    reply = "Thought: load the data\nAction:\n```python\nimport pandas as pd\nprint(1)\n```\n"
    parsed = parse_reply(reply)
    assert parsed.status is ReplyStatus.CODE
    assert parsed.thought == "load the data" and parsed.code == "import pandas as pd\nprint(1)"


def test_answer_reply():
    parsed = parse_reply("Thought: done\nFormatted answer: @mean_fare[34.65]")
    assert parsed.status is ReplyStatus.ANSWER and parsed.answer == "@mean_fare[34.65]"
    assert parsed.thought == "done"


def test_text_after_hallucinated_observation_is_ignored():
    reply = "Thought: x\nAction:\n```python\nprint(2)\n```\nObservation:\n2\nFormatted answer: @a[2]"
    parsed = parse_reply(reply)
    assert parsed.status is ReplyStatus.CODE and parsed.code == "print(2)" and parsed.answer is None


def test_answer_after_code_is_a_guess_and_code_wins():
    parsed = parse_reply("Thought: x\n```python\nprint(3)\n```\nFormatted answer: @a[3]")
    assert parsed.status is ReplyStatus.CODE


def test_statuses():
    assert parse_reply("").status is ReplyStatus.UNPARSABLE
    assert parse_reply("   \n").status is ReplyStatus.UNPARSABLE
    assert parse_reply("Thought: I am thinking").status is ReplyStatus.NO_CODE
    assert parse_reply("Thought: a\nAction:\n```python\n\n```").status is ReplyStatus.EMPTY_CODE
    unclosed = parse_reply("Thought: a\n```python\nx = 1\n")
    assert unclosed.status is ReplyStatus.CODE and unclosed.code == "x = 1"
    first_only = parse_reply("```python\na=1\n```\n```python\nb=2\n```")
    assert first_only.code == "a=1"


@given(st.text(max_size=300))
def test_parser_never_raises_and_status_is_consistent(text):
    parsed = parse_reply(text)
    if parsed.status is ReplyStatus.CODE:
        assert parsed.code and parsed.code.strip()
    if parsed.status is ReplyStatus.ANSWER:
        assert parsed.answer is not None


@given(st.text(alphabet=st.characters(blacklist_characters="`", blacklist_categories=("Cs",)), max_size=80).filter(
    lambda s: "Observation:" not in s and "Formatted answer" not in s.lower() and "thought:" not in s.lower()
), st.from_regex(r"[a-z_]{1,8} = [0-9]{1,4}", fullmatch=True))
def test_render_then_parse_round_trips(thought, code):
    thought = thought.strip()
    turn = Turn(thought=thought, code=code)
    parsed = parse_reply(render_assistant(turn))
    assert parsed.status is ReplyStatus.CODE and parsed.code == code


def test_messages_alternate_and_are_byte_stable():
    turns = [Turn("load", "x = 1", "out"), Turn("done", answer="@mean_fare[1]")]
    messages = build_messages(TASK, turns)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[3]["content"] == "Observation:\nout"
    assert "Answer format: @mean_fare[value]" in messages[1]["content"]
    assert build_messages(TASK, turns[:1]) == messages[:4]  # a prefix path gives a prefix chat


def test_render_prompt_templates():
    messages = build_messages(TASK, [Turn("t", "x=1", "1")])
    gemma = render_prompt(messages, GEMMA)
    assert gemma.startswith("<start_of_turn>user\nYou are an expert")
    assert gemma.endswith("<start_of_turn>model\n") and "<start_of_turn>system" not in gemma
    chatml = render_prompt(messages, CHATML)
    assert chatml.startswith("<|im_start|>system\n") and chatml.endswith("<|im_start|>assistant\n")
