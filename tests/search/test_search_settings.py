"""Job settings: one model that the profiles fill, the command-line flags are made from, and a server job takes."""

from __future__ import annotations

import argparse

import pytest

from jupiter.cli import build_parser
from jupiter.commands.search_args import FIELD_FLAGS, add_search_arguments, config_from_args
from jupiter.commands.solve_remote import remote_settings, run_remote
from jupiter.task import TaskError
from search import ConfigError, Mode, SearchConfig
from search.profiles import PROFILES, profile_values, resolve_profile
from search.settings import JobSettings, LocalSettings, parse_job_settings, resolve_settings

GIVEN = {"iterations": "7", "expansions": "2", "max_depth": "4", "c_puct": "0.5", "decision": "value",
         "vote_key": "format", "temperature": "0.3", "top_p": "0.9", "max_tokens": "64", "repeat_retries": "2",
         "leaves_per_step": "2", "vote_runs": "3", "cell_timeout": "9"}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("mode", list(Mode))
def test_every_search_setting_has_its_default_in_the_profile(profile, mode):
    values = profile_values(profile, mode)
    assert set(values) == set(SearchConfig.model_fields) - {"mode"}
    if profile == "paper":  # a bare SearchConfig is the paper's settings for its mode
        assert SearchConfig(mode=mode) == resolve_profile(profile, mode)


def test_every_setting_is_a_solve_flag_that_reaches_the_search_config():
    assert set(GIVEN) | {"mode", "seed"} == set(LocalSettings.model_fields)
    argv = ["solve", "task.json", "--mode", "collect"] + [a for k, v in GIVEN.items() for a in (FIELD_FLAGS[k], v)]
    config = config_from_args(build_parser(only="solve").parse_args(argv)).to_dict()
    assert config["mode"] == "collect"
    assert {k: str(config[k]) for k in GIVEN} == {k: str(type(config[k])(v)) for k, v in GIVEN.items()}


def test_a_flag_out_of_range_is_named_as_the_flag():
    args = build_parser(only="solve").parse_args(["solve", "task.json", "--max-tokens", "0"])
    with pytest.raises(TaskError, match="^--max-tokens: must be"):
        config_from_args(args)
    args = build_parser(only="solve").parse_args(["solve", "task.json", "--max-tokens", "20000"])
    with pytest.raises(TaskError, match="^--max-tokens: 20000 leaves no room"):
        config_from_args(args)


def test_flag_help_shows_the_default_profile_value_per_mode():
    parser = argparse.ArgumentParser()
    add_search_arguments(parser, modes=("infer", "collect"))
    helps = {a.dest: a.help for a in parser._actions}
    assert "(paper: infer 40, collect 50)" in helps["iterations"]
    assert "(paper: 0.95)" in helps["top_p"]


def test_seed_is_one_flag_the_same_in_solve_bench_and_collection():
    from jupiter.commands.collect import collect_parser

    def command(parser: argparse.ArgumentParser, *names: str) -> argparse.ArgumentParser:
        for name in names:
            parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        return parser

    parsers = [command(build_parser(only="solve"), "solve"), command(build_parser(only="bench"), "bench", "dabench"),
               collect_parser()]
    seeds = [next(a for a in p._actions if a.dest == "seed") for p in parsers]
    assert {(a.default, a.type, a.help) for a in seeds} == {(0, int, JobSettings.model_fields["seed"].description)}


def test_job_settings_refuse_unknown_names_and_wrong_types_naming_them():
    with pytest.raises(ConfigError, match="unknown setting.*bogus.*known: mode"):
        parse_job_settings({"bogus": 1})
    for bad in ({"iterations": True}, {"iterations": "3"}, {"top_p": 0}, {"mode": "dance"}, {"seed": 1.5}):
        with pytest.raises(ConfigError, match=f"settings.{next(iter(bad))}"):
            parse_job_settings(bad)
    settings = parse_job_settings({"mode": "react", "expansions": 3, "c_puct": 1.0, "seed": None})
    config = resolve_settings(settings)
    assert (config.mode, config.expansions, config.c_puct) == (Mode.REACT, 1, 0.0), "baselines take one reply"


def test_solve_server_sends_job_settings_and_refuses_what_the_server_decides():
    parser = build_parser(only="solve")
    args = parser.parse_args(["solve", "task.json", "--server", "http://127.0.0.1:9", "--vote-runs", "3"])
    assert remote_settings(args) == {"mode": "infer", "vote_runs": 3, "seed": 0}
    assert set(remote_settings(args)) <= set(JobSettings.model_fields)
    args = parser.parse_args(["solve", "task.json", "--server", "http://127.0.0.1:9", "--cell-timeout", "5"])
    with pytest.raises(TaskError, match="--cell-timeout: chosen by the server"):
        run_remote(args)


def test_the_search_budget_is_capped_at_the_policy_window():
    from search import SearchConfig
    from search.config import fit_context

    config = SearchConfig(max_tokens=384)
    assert fit_context(config, 4096).context_limit == 4096
    assert fit_context(config, None) is config and fit_context(config, 100_000) is config
    assert fit_context(config, 300) is config  # no room for a reply: left alone (the engine cuts it)
