"""Search profiles: the paper's settings are the default, and each setting says where it comes from."""

from __future__ import annotations

import pytest

from search import ConfigError, SearchConfig
from search.profiles import describe_profile, resolve_profile


def test_paper_profile_is_the_default_and_says_where_each_setting_comes_from():
    infer, collect = resolve_profile("paper", "infer"), resolve_profile("paper", "collect")
    assert (infer.c_puct, infer.decision.value, infer.iterations, infer.expansions) == (0.0, "vote", 40, 3)
    assert (collect.c_puct, collect.temperature, collect.top_p, collect.iterations) == (1.25, 1.0, 0.95, 50)
    assert SearchConfig() == infer and SearchConfig(mode="collect").c_puct == 1.25
    sources = {s.source for s in describe_profile("paper", "infer").values()}
    assert sources <= {"paper", "reference code", "ours"} and "paper" in sources


def test_an_unknown_profile_is_refused_with_the_known_ones():
    with pytest.raises(ConfigError, match=r"profile: 'fast' is not one of \['paper'\]"):
        resolve_profile("fast", "infer")
