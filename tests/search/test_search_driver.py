"""The engine end to end on fakes: batching, modes, evaluation rules, streaming, failures, reference tree."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
from search_fakes import ConstantValue, FakePolicy, FakeSandbox, answer, code

from jupiter.task import Task
from search import Mode, SearchConfig, run_search, solve_many
from search.baselines import react_config, vote_config
from search.tree import NodeStatus, TerminalReason
from search.tree_io import tree_to_dict

DATA = Path(__file__).parent / "data"
TASK = Task(id="sum", question="What is 1 + 2?", format="@x[value]", label="@x[3]")

GOOD = code("add", "x = 1 + 2\nprint(x)")
BAD = code("divide", "y = 1 / 0")
CHAT = "Thought: I think I will just chat."


def script():
    return [
        ("Task:", [GOOD, BAD, CHAT]),
        ("Observation:\n3", [answer("@x[3]"), answer("@x[4]")]),
        ("ZeroDivisionError", [BAD]),
    ]


def test_collect_search_scores_answers_against_the_label():
    sandbox = FakeSandbox()
    config = SearchConfig(mode=Mode.COLLECT, iterations=10, expansions=3, max_consecutive_errors=1)
    result = run_search(TASK, FakePolicy(script()), sandbox, config, seed=0)
    tree = result.tree
    assert result.error is None
    assert result.answer == "@x[3]" and result.correct is True
    values = {n.final_answer: n.evaluation for n in tree.answers()}
    assert values == {"@x[3]": 1.0, "@x[4]": -1.0}
    chat = next(n for n in tree.nodes if n.status is NodeStatus.NO_CODE)
    assert chat.evaluation == -1.0 and chat.terminal is TerminalReason.NO_CODE
    assert any(n.terminal is TerminalReason.TOO_MANY_ERRORS for n in tree.nodes)
    # reference back-up rule: nodes with a value of their own are backed up once each; an expansion whose new
    # live children have none adds ONE zero visit from the expanded node (not one per child)
    own = sum(1 for n in tree.nodes[1:] if n.evaluation is not None)
    zero = sum(1 for n in tree.nodes if any(c.evaluation is None for c in n.children))
    assert zero >= 1 and tree.root.visit_count == own + zero
    assert all(c.visit_count == 0 for n in tree.nodes for c in n.children if c.evaluation is None and not c.expanded)
    assert result.stats.model_failures >= 2 and result.stats.infrastructure_failures == 0
    assert tree.root.exhausted and result.stats.iterations < 10  # search stopped when nothing was left
    assert result.stats.nodes == len(tree.nodes)
    assert not sandbox.closed  # run_search leaves the caller's sandbox open


def test_per_child_backup_rule_backs_up_every_new_node():
    config = SearchConfig(mode=Mode.COLLECT, iterations=10, expansions=3, max_consecutive_errors=1,
                          backup_rule="per-child")
    tree = run_search(TASK, FakePolicy(script()), FakeSandbox(), config, seed=0).tree
    assert tree.root.visit_count == len(tree.nodes) - 1  # every node but the root once


def test_one_policy_call_per_step_across_trees():
    policy = FakePolicy([("Task:", [GOOD, CHAT]), ("Observation:", [GOOD, BAD])])
    tasks = [TASK.replace(id=f"t{i}") for i in range(5)]
    steps = []
    config = SearchConfig(mode=Mode.INFER, iterations=4, expansions=2, max_trees_in_flight=8)
    results = list(solve_many(tasks, policy, FakeSandbox, config, seed=1, on_step=steps.append))
    assert sorted(r.task_id for r in results) == [f"t{i}" for i in range(5)]
    assert len(policy.calls) == len(steps) == 4
    assert all(histories == 5 and n == 2 for histories, n in policy.calls)
    assert all(s.model_calls == 1 and s.requests == 5 for s in steps)
    assert all(r.stats.model_calls == 4 and r.stats.iterations == 4 for r in results)


def test_leaves_per_step_expands_several_leaves_of_a_tree_in_one_policy_call():
    policy = FakePolicy([("Task:", [GOOD, CHAT]), ("Observation:", [GOOD, BAD])])
    steps = []
    config = SearchConfig(mode=Mode.INFER, iterations=7, expansions=2, leaves_per_step=3,
                          malformed_terminal=True)
    result = run_search(TASK, policy, FakeSandbox(), config, seed=1, on_step=steps.append)
    # step 1: the root is the only leaf; step 2: its one live child; then up to 3 leaves a step, 7 in all
    assert [s.requests for s in steps] == [1, 1, 2, 3]
    assert [histories for histories, _ in policy.calls] == [1, 1, 2, 3]
    assert result.stats.iterations == 7 and result.stats.model_calls == 4
    expanded = [n for n in result.tree.nodes if n.expanded]
    assert len(expanded) == 7 and len({n.tag for n in expanded}) == 7  # no leaf expanded twice
    again = run_search(TASK, FakePolicy(policy.script), FakeSandbox(), config, seed=1)
    assert _comparable(tree_to_dict(again.tree)) == _comparable(tree_to_dict(result.tree))


def test_trees_in_flight_are_bounded_and_results_stream():
    quick = Task(id="quick", question="Answer at once please", label="@x[3]")
    policy = FakePolicy([("Answer at once", [answer("@x[3]")]), ("Task:", [GOOD]), ("Observation:", [GOOD])])
    config = SearchConfig(iterations=6, expansions=1, max_trees_in_flight=2)
    stream = solve_many([quick, TASK, TASK.replace(id="third")], policy, FakeSandbox, config)
    first = next(stream)
    assert first.task_id == "quick" and first.answer == "@x[3]"
    assert len(policy.calls) == 1  # yielded before the other tree went on
    rest = list(stream)
    assert [r.task_id for r in rest] == ["sum", "third"]
    assert max(h for h, _ in policy.calls) <= 2


def test_infrastructure_failures_end_the_branch_but_are_not_model_failures():
    timeout = code("slow", "INFRA_TIMEOUT = 1")
    policy = FakePolicy([("Task:", [timeout, GOOD]), ("Observation:\n3", [answer("@x[3]")])])
    config = SearchConfig(mode=Mode.COLLECT, iterations=5, expansions=2)
    result = run_search(TASK, policy, FakeSandbox(), config)
    infra = [n for n in result.tree.nodes if n.is_infrastructure_failure]
    assert len(infra) == 1 and infra[0].visit_count == 0 and infra[0].evaluation is None
    assert infra[0].exec_status == "timeout"
    assert result.stats.infrastructure_failures == 1 and result.stats.model_failures == 0
    assert result.answer == "@x[3]"


def test_sandbox_failure_is_an_error_on_that_tree_only():
    class Broken(FakeSandbox):
        def open_root(self, input_files=()):
            raise OSError("no kernel")

    made = []

    def factory():
        made.append(Broken() if not made else FakeSandbox())
        return made[-1]

    policy = FakePolicy(script())
    results = list(solve_many([TASK.replace(id="a"), TASK.replace(id="b")], policy, factory,
                              SearchConfig(iterations=3)))
    by_id = {r.task_id: r for r in results}
    assert "no kernel" in by_id["a"].error and by_id["a"].answer is None
    assert by_id["b"].error is None
    assert all(s.closed for s in made)  # the driver closes what the factory made


class ReusableFake(FakeSandbox):
    """A fake that can be reset: ``resets`` counts them, ``reset_ok`` says what ``reset`` answers."""

    def __init__(self, reset_ok: bool = True) -> None:
        super().__init__()
        self.resets = 0
        self.reset_ok = reset_ok
        self.roots = 0

    def open_root(self, input_files=()):
        assert not self.closed, "a closed sandbox was handed to a tree"
        self.roots += 1
        return super().open_root(input_files)

    def reset(self) -> bool:
        self.resets += 1
        return self.reset_ok


def _solve_on(factory, n_tasks: int, in_flight: int):
    tasks = [TASK.replace(id=f"t{i}") for i in range(n_tasks)]
    config = SearchConfig(mode=Mode.COLLECT, iterations=3, max_trees_in_flight=in_flight)
    return list(solve_many(tasks, FakePolicy(script()), factory, config))


def test_a_finished_trees_sandbox_is_reset_for_the_next_tree_and_closed_at_the_end():
    made: list[ReusableFake] = []
    results = _solve_on(lambda: made.append(ReusableFake()) or made[-1], n_tasks=5, in_flight=2)
    assert sorted(r.task_id for r in results) == [f"t{i}" for i in range(5)]
    assert all(r.error is None and r.correct for r in results)
    assert len(made) == 2  # no more sandboxes than trees in flight
    assert sum(b.roots for b in made) == 5 and sum(b.resets for b in made) == 5
    assert all(b.closed for b in made)


def test_a_sandbox_that_cannot_be_reset_is_closed_and_replaced():
    made: list[ReusableFake] = []
    results = _solve_on(lambda: made.append(ReusableFake(reset_ok=False)) or made[-1], n_tasks=3, in_flight=1)
    assert len(results) == 3 and len(made) == 3 and all(b.closed and b.roots == 1 for b in made)


def test_idle_sandboxes_are_closed_when_the_queue_runs_dry():
    """A tree that finishes after the last task was admitted does not keep its sandbox (and zygote) open for the
    rest of the run."""
    made: list[ReusableFake] = []
    quick = TASK.replace(id="quick", question="Quick: what is 3?")
    slow = TASK.replace(id="slow")
    policy = FakePolicy([("Quick", [answer("@x[3]")]), ("Task:", [GOOD]), ("Observation:", [GOOD])])
    config = SearchConfig(mode=Mode.COLLECT, iterations=4, expansions=1, max_trees_in_flight=2)
    closed_when: dict[str, list[bool]] = {}
    for result in solve_many([quick, slow], policy, lambda: made.append(ReusableFake()) or made[-1], config):
        closed_when[result.task_id] = [b.closed for b in made]
    assert list(closed_when) == ["quick", "slow"]
    assert sorted(closed_when["slow"]) == [False, True]  # the quick tree's sandbox went when the queue ran dry
    assert len(made) == 2 and all(b.closed for b in made)


def test_collect_without_label_is_an_error():
    result = run_search(TASK.replace(label=None), FakePolicy(script()), FakeSandbox(),
                        SearchConfig(mode=Mode.COLLECT))
    assert "needs a label" in result.error


def test_value_model_is_batched_and_decides_in_infer_mode():
    value = ConstantValue(0.5)
    config = SearchConfig(mode=Mode.INFER, iterations=3, expansions=3, c_puct=0.0)
    result = run_search(TASK, FakePolicy(script()), FakeSandbox(), config, value=value)
    assert value.calls == result.stats.value_calls <= result.stats.iterations
    assert result.decided_by == "vote"  # the paper reports the majority vote, also with a value model
    assert result.value_answer is not None  # ... and the value-selected answer is recorded beside it
    assert all(n.evaluation == 0.5 for n in result.tree.answers())
    assert result.stats.value_calls >= 1
    chosen = run_search(TASK, FakePolicy(script()), FakeSandbox(), config.replace(decision="value"), value=value)
    assert chosen.decided_by == "value" and chosen.answer == chosen.value_answer


def test_the_trees_shares_of_policy_and_value_time_add_up_to_the_calls() -> None:
    """Each tree is charged its share of every batched call's wall time (split over the histories sent), and each
    scored node records its share of the value call: the scoring-cost target compares the two per node."""
    import time as clock

    class SlowPolicy(FakePolicy):
        def generate(self, histories, params):
            clock.sleep(0.02)
            return super().generate(histories, params)

    class SlowValue(ConstantValue):
        def evaluate(self, histories):
            clock.sleep(0.03)
            return super().evaluate(histories)

    value = SlowValue(0.5)
    config = SearchConfig(mode=Mode.INFER, iterations=3, expansions=3, c_puct=0.0)
    tasks = [TASK.replace(id=f"t{i}") for i in range(3)]
    started = clock.perf_counter()
    results = list(solve_many(tasks, SlowPolicy(script()), FakeSandbox, config, value=value))
    wall = clock.perf_counter() - started
    steps = max(r.stats.model_calls for r in results)
    model = sum(r.stats.model_seconds for r in results)
    assert 0.02 * steps <= model < wall  # one call per step serves all three trees: its time is counted once
    scored = [n for r in results for n in r.tree.nodes if "value_s" in n.timings]
    assert scored and sum(r.stats.value_seconds for r in results) >= 0.03 * value.calls
    assert sum(n.timings["value_s"] for n in scored) == pytest.approx(sum(r.stats.value_seconds for r in results),
                                                                      abs=1e-4)
    assert all(r.stats.to_dict()["value_seconds"] > 0 for r in results)


def test_no_value_answer_without_a_value_model():
    result = run_search(TASK, FakePolicy(script()), FakeSandbox(), SearchConfig(iterations=4))
    assert result.answer is not None and result.value_answer is None


def test_max_depth_ends_paths():
    policy = FakePolicy([("Task:", [GOOD]), ("Observation:", [GOOD])])
    result = run_search(TASK, policy, FakeSandbox(), SearchConfig(iterations=20, expansions=1, max_depth=3))
    depths = [n.depth for n in result.tree.nodes]
    assert max(depths) == 4  # reference code: a node is terminal when depth > max_depth
    assert result.tree.nodes[-1].terminal is TerminalReason.MAX_DEPTH
    assert result.answer is None and result.stats.iterations == 4


def test_expanded_states_are_released():
    """An expanded node is never branched again: its state goes back to the sandbox after the step (the root's
    stays), and the tree's nodes hold no states at all (the executor maps nodes to states)."""
    sandbox = FakeSandbox()
    policy = FakePolicy([("Task:", [GOOD]), ("Observation:", [GOOD])])
    live: list[int] = []
    result = run_search(TASK, policy, sandbox, SearchConfig(iterations=3, expansions=1, max_depth=5),
                        on_update=lambda _update: live.append(sum(not s.closed for s in sandbox.states)))
    assert live == [1, 2, 2, 2]  # the root alone, then the root and the newest leaf
    assert all(s.closed for s in sandbox.states) and not any(hasattr(n, "state") for n in result.tree.nodes)
    assert sandbox.cells == 3


def test_react_runs_one_path_at_low_temperature():
    seen = []

    class Recording(FakePolicy):
        def generate(self, histories, params):
            seen.append(params)
            return super().generate(histories, params)

    result = run_search(TASK, Recording(script()), FakeSandbox(), react_config())
    assert all(p.n == 1 and p.temperature == 0.2 for p in seen)
    assert [n.depth for n in result.tree.nodes] == [0, 1, 2]
    assert result.answer == "@x[3]" and result.stats.iterations == 2


def test_vote_runs_independent_paths_and_takes_the_majority():
    replies = [GOOD, GOOD, BAD, GOOD, CHAT]
    policy = FakePolicy([("Task:", replies), ("Observation:\n3", [answer("@x[3]")]),
                         ("ZeroDivisionError", [answer("@x[0]")])])
    result = run_search(TASK, policy, FakeSandbox(), vote_config())
    assert len(result.tree.root.children) == 5  # duplicates are independent runs, not dropped
    assert policy.calls[0] == (1, 5) and all(n == 1 for _, n in policy.calls[1:])
    assert policy.calls[1] == (4, 1)  # the four live paths go in one call
    assert result.vote_table == {"@x[3]": 3, "@x[0]": 1}
    assert result.answer == "@x[3]" and result.decided_by == "vote"


def _comparable(tree_dict):
    for node in tree_dict["nodes"]:
        node.pop("timings")
    return tree_dict


def test_reference_tree_for_a_fixed_seed():
    policy = FakePolicy(script(), logprobs={GOOD: -0.2, BAD: -0.9, CHAT: -1.5})
    config = SearchConfig(mode=Mode.COLLECT, iterations=6, expansions=3, max_consecutive_errors=2)
    result = run_search(TASK, policy, FakeSandbox(), config, seed=7)
    got = _comparable(tree_to_dict(result.tree))
    path = DATA / "reference_tree.json"
    if os.environ.get("JUPITER_REGEN_REFERENCE"):
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert got == expected


def test_run_search_hands_back_every_state_of_a_shared_sandbox():
    states = []

    class Tracking(FakeSandbox):
        def open_root(self, input_files=()):
            root = super().open_root(input_files)
            original = root.branch

            def branch():
                child = original()
                states.append(child)
                return child
            root.branch = branch
            states.append(root)
            return root

    policy = FakePolicy([("Task:", [GOOD, CHAT])])
    run_search(TASK, policy, Tracking(), SearchConfig(iterations=1, expansions=2))
    assert states and all(s.closed for s in states)


class _Budget:
    """A memory budget that holds ``fit`` sandboxes whatever their states (records what it was asked)."""

    limit_bytes = None  # its size is unknown

    def __init__(self, fit: int) -> None:
        self.fit = fit
        self.asked: list[int] = []

    def sandboxes_that_fit(self, states: int) -> int:
        self.asked.append(states)
        return self.fit


def _budgeted_sandboxes(budget: _Budget):
    def factory() -> FakeSandbox:
        box = FakeSandbox()
        box.memory_budget = budget
        return box
    return factory


def _trees_per_call(fit: int, **settings) -> tuple[int, _Budget]:
    budget = _Budget(fit)
    policy = FakePolicy([("Task:", [GOOD]), ("Observation:", [GOOD])])
    tasks = [TASK.replace(id=f"t{i}") for i in range(6)]
    config = SearchConfig(mode=Mode.COLLECT, iterations=3, expansions=1, **settings)
    results = list(solve_many(tasks, policy, _budgeted_sandboxes(budget), config))
    assert sorted(r.task_id for r in results) == [f"t{i}" for i in range(6)]
    return max(h for h, _ in policy.calls), budget


def test_trees_in_flight_follow_what_the_memory_budget_holds(caplog):
    """Trees beyond what the sandboxes' memory budget holds at their peak would only make it evict states the
    trees still need; so the driver admits no more trees than fit, and says so once."""
    most, budget = _trees_per_call(2, max_trees_in_flight=16)
    assert most == 2
    assert set(budget.asked) == {2 + 3 * 0}  # the root and the leaves of 3 iterations of K=1
    said = [r.getMessage() for r in caplog.records if "memory budget" in r.getMessage()]
    assert said == ["the sandboxes' memory budget holds 2 tree(s) at their peak of 2 live states each: 2 run at "
                    "once, not 16 (more memory for the sandboxes: $JUPITER_SANDBOX_MEMORY_MB, docs/sandbox.md)"]


def test_max_trees_in_flight_stays_the_upper_bound_when_more_would_fit(caplog):
    most, _ = _trees_per_call(10, max_trees_in_flight=3)
    assert most == 3 and "memory budget" not in caplog.text


def test_trees_in_flight_ignore_memory_when_told_to():
    most, budget = _trees_per_call(1, max_trees_in_flight=4, fit_trees_to_memory=False)
    assert most == 4 and budget.asked == []


class _RepeatsAtLowTemperature(FakePolicy):
    """After its cell fails, writes the same cell again unless sampled at temperature 1.0 or more."""

    def __init__(self, fixed_at_high: bool = True) -> None:
        super().__init__([("Task:", [BAD]), ("Observation:\n3", [answer("@x[3]")])])
        self.fixed_at_high = fixed_at_high
        self.temperatures: list[float] = []

    def replies_for(self, history):
        last = [m for m in history if m["role"] == "user"][-1]["content"]
        if "ZeroDivisionError" in last:
            return [GOOD if self.fixed_at_high and self.params.temperature >= 1.0 else BAD]
        return super().replies_for(history)

    def generate(self, histories, params):
        self.params = params
        self.temperatures.append(params.temperature)
        out = super().generate(histories, params)  # a prompt of 10 tokens a message
        return [[dataclasses.replace(c, prompt_tokens=10 * len(h)) for c in cs] for h, cs in zip(histories, out)]


def test_a_repeat_of_a_failed_cell_is_sampled_again_when_asked():
    off = run_search(TASK, _RepeatsAtLowTemperature(), FakeSandbox(), react_config(max_consecutive_errors=2))
    assert off.answer is None and off.stats.repeats_resampled == 0

    policy = _RepeatsAtLowTemperature()
    result = run_search(TASK, policy, FakeSandbox(), react_config(max_consecutive_errors=2, repeat_retries=2))
    assert result.answer == "@x[3]"
    assert [n.code for n in result.tree.nodes[1:3]] == ["y = 1 / 0", "x = 1 + 2\nprint(x)"]
    assert result.stats.repeats_resampled == 1
    assert policy.temperatures == [0.2, 0.2, 1.0, 0.2]  # the retry alone at the higher temperature
    assert result.stats.model_calls == 4 and result.stats.requests == 4
    assert result.stats.prompt_tokens == 20 + 40 + 40 + 60  # the retry's prompt counts too


def test_a_cell_that_keeps_repeating_is_resampled_at_most_repeat_retries_times_per_step():
    policy = _RepeatsAtLowTemperature(fixed_at_high=False)
    result = run_search(TASK, policy, FakeSandbox(), react_config(max_consecutive_errors=2, repeat_retries=3))
    assert result.answer is None
    codes = [n.code for n in result.tree.nodes[1:]]
    assert codes == ["y = 1 / 0"] * 3  # the last sample stands: the branch ends on its errors as before
    assert result.stats.repeats_resampled == 2 * 3
