"""Sampling with the windowed top-p on the real embedded model: a seed gives the same text every time, and the
same text as the engine's own top-p (``#nucleus=engine``), on both local backends.

The transformers test runs in the default suite (one model load); the engine comparisons load a backend twice
and are slow.
"""

from __future__ import annotations

import pytest

from jupiter.llm import SamplingParams, load_policy
from jupiter.prompts import build_messages
from jupiter.task import load_task_file
from tests.conftest import REPO

pytest.importorskip("transformers")

TASK = REPO / "jupiter/examples/titanic_mean_fare.json"
PARAMS = SamplingParams(n=3, temperature=0.7, top_p=0.95, max_tokens=24, seed=5, stop=())


def _histories() -> list:
    task = load_task_file(TASK)
    turn = build_messages(task)
    follow = [*turn, {"role": "assistant", "content": "Thought: look at the columns.\n```python\nimport pandas as "
                      "pd\ndf = pd.read_csv('test_ave.csv')\ndf.columns\n```"},
              {"role": "user", "content": "Observation: Index(['PassengerId', 'Survived', 'Pclass', 'Name', 'Sex', "
                                          "'Age', 'Fare'], dtype='object')"}]
    return [turn, follow]


def _texts(spec: str, params: SamplingParams = PARAMS) -> list[list[str]]:
    with load_policy(spec) as policy:
        return [[c.text for c in out] for out in policy.generate(_histories(), params)]


def test_transformers_window_sampling_is_reproducible_and_filters_by_default():
    with load_policy("hf:default") as policy:
        assert policy.nucleus == "window"
        first = [[c.text for c in out] for out in policy.generate(_histories(), PARAMS)]
        again = [[c.text for c in out] for out in policy.generate(_histories(), PARAMS)]
        greedy = policy.generate(_histories()[:1], SamplingParams(n=2, temperature=0, max_tokens=8, stop=()))[0]
    assert first == again and all(len(out) == 3 for out in first)
    assert len(greedy) == 2 and greedy[0].text == greedy[1].text  # transformers alone refuses greedy n > 1
    assert len({text for out in first for text in out}) > 1  # sampled, not greedy


@pytest.mark.slow
def test_transformers_window_gives_the_texts_of_transformers_own_top_p():
    assert _texts("hf:default#nucleus=window") == _texts("hf:default#nucleus=engine")


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_vllm_window_gives_the_texts_of_the_engines_own_top_p(temperature):
    pytest.importorskip("vllm")
    params = SamplingParams(n=3, temperature=temperature, top_p=0.95, max_tokens=24, seed=5, stop=())
    window = _texts("vllm:default#nucleus=window", params)
    assert window == _texts("vllm:default#nucleus=window", params)  # a fresh engine, the same seed: same text
    assert window == _texts("vllm:default#nucleus=engine", params)
