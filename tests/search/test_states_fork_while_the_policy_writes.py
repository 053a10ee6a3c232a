"""``SearchConfig.branch_ahead``: the executor asks a node's state for its K branches before the policy call that
writes their cells (``sandbox.State.prefetch``), so the forks overlap generation; the tree is the same."""

from __future__ import annotations

import copy
import time

from search_fakes import FakePolicy, FakeSandbox, FakeState, answer, code
from test_search_driver import TASK, _comparable, script

from search import Mode, SearchConfig, run_search
from search.tree_io import tree_to_dict


class PrefetchingState(FakeState):
    def prefetch(self, n: int) -> None:
        self.sandbox.prefetched.append((self, n, len(self.sandbox.policy.calls)))

    def branch(self) -> PrefetchingState:
        assert not self.closed, "branching a released state"
        self.sandbox.branches += 1
        namespace = {k: copy.copy(v) for k, v in self.namespace.items() if k != "__builtins__"}
        return PrefetchingState(namespace, self.sandbox)


class PrefetchingSandbox(FakeSandbox):
    def __init__(self, policy: FakePolicy) -> None:
        super().__init__()
        self.policy = policy
        self.prefetched: list[tuple[FakeState, int, int]] = []  # (state, n, policy calls made before)

    def open_root(self, input_files=()) -> PrefetchingState:
        return PrefetchingState({}, self)


def _search(branch_ahead: bool) -> tuple[PrefetchingSandbox, FakePolicy, dict]:
    policy = FakePolicy(script(), logprobs={})
    sandbox = PrefetchingSandbox(policy)
    config = SearchConfig(mode=Mode.COLLECT, iterations=6, expansions=3, max_consecutive_errors=2,
                          branch_ahead=branch_ahead)
    result = run_search(TASK, policy, sandbox, config, seed=7)
    return sandbox, policy, _comparable(tree_to_dict(result.tree))


def test_every_policy_call_is_preceded_by_a_prefetch_of_its_nodes_states() -> None:
    sandbox, policy, _ = _search(branch_ahead=True)
    assert len(policy.calls) == 6
    for call, (histories, n) in enumerate(policy.calls):  # one node per step: K = 3 branches asked for first
        asked = [(state, k) for state, k, before in sandbox.prefetched if before == call]
        assert len(asked) == histories and all(k == n == 3 for _, k in asked)
    assert sandbox.prefetched[0][0] is sandbox.states[0]  # the root first


def test_branching_ahead_grows_the_same_tree() -> None:
    ahead_sandbox, ahead_policy, ahead_tree = _search(branch_ahead=True)
    plain_sandbox, plain_policy, plain_tree = _search(branch_ahead=False)
    assert not plain_sandbox.prefetched and ahead_sandbox.prefetched
    assert ahead_tree == plain_tree and ahead_policy.calls == plain_policy.calls
    assert ahead_sandbox.cells == plain_sandbox.cells


def test_a_state_that_fails_to_prefetch_is_branched_when_needed() -> None:
    class Failing(PrefetchingState):
        def prefetch(self, n: int) -> None:
            raise RuntimeError("no fork ahead today")

        def branch(self) -> Failing:
            child = super().branch()
            return Failing(child.namespace, child.sandbox)

    policy = FakePolicy([("Task:", [code("add", "x = 1 + 2\nprint(x)")]), ("Observation:", [answer("@x[3]")])])
    sandbox = PrefetchingSandbox(policy)
    sandbox.open_root = lambda input_files=(): Failing({}, sandbox)
    result = run_search(TASK, policy, sandbox, SearchConfig(mode=Mode.COLLECT, iterations=3, expansions=1))
    assert result.error is None and result.answer == "@x[3]" and result.correct is True


def test_the_real_sandbox_hands_the_search_the_branches_it_forked_ahead(dabench_tasks, sandbox) -> None:
    """On real IPython states every child that runs a cell takes a branch forked while the policy wrote it, and
    the branches not taken (children that answered) are closed with their parent: no state is left behind."""
    from test_search_integration import policy_for

    before = sandbox.stats()
    config = SearchConfig(mode=Mode.COLLECT, iterations=8, expansions=3, cell_timeout=60)
    result = run_search(dabench_tasks[0], policy_for(0), sandbox, config, seed=3)
    after = sandbox.stats()
    assert result.error is None and result.correct is True
    cells = sum(1 for node in result.tree.nodes if node.code is not None)
    taken = after.branches_ahead_taken - before.branches_ahead_taken
    assert cells > 0 and taken == cells
    assert after.branches_ahead - before.branches_ahead >= taken
    deadline = time.monotonic() + 10  # a discarded branch still forking is closed as soon as it is made
    while sandbox.stats().live_states != before.live_states and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.stats().live_states == before.live_states  # every state of the search went back
