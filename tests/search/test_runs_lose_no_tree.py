"""The run layer every entry point uses (``search.resumable.search_trees``): a policy that dies or a Ctrl-C between
steps hands back every tree in flight over what it had and saves it, a rerun continues those trees, and a finished
tree's checkpoint stays until its result has been taken."""

from __future__ import annotations

import pytest
from search_fakes import FakePolicy, FakeSandbox, answer, code

from jupiter.llm.types import PolicyError
from jupiter.task import Task
from search import Mode, SearchConfig
from search.checkpoints import TreeCheckpoints
from search.resumable import search_trees

TASKS = [Task(id=f"t{i}", question=f"What is {i} + 2?", format="@x[value]", label=f"@x[{i + 2}]") for i in range(3)]
SCRIPT = [("Task:", [code("set", "x = 1\nprint('x', x)")]), ("Observation:", [code("more", "x += 1\nprint('x', x)")])]
CONFIG = SearchConfig(mode=Mode.COLLECT, iterations=6, expansions=1, max_trees_in_flight=3)


class DiesAfter(FakePolicy):
    """The scripted policy, whose backend dies at call ``calls`` (a server that went away)."""

    def __init__(self, calls: int) -> None:
        super().__init__(SCRIPT)
        self.limit = calls

    def generate(self, histories, params):
        if len(self.calls) >= self.limit:
            raise PolicyError("connection refused")
        return super().generate(histories, params)


def test_a_dead_policy_hands_back_every_tree_in_flight_saved_and_a_rerun_continues_them(tmp_path):
    checkpoints = TreeCheckpoints(tmp_path / "checkpoints", every_s=1e9, settings=CONFIG.to_dict())
    got = []
    with pytest.raises(PolicyError, match="connection refused"):
        for result in search_trees(TASKS, DiesAfter(3), FakeSandbox, CONFIG, checkpoints=checkpoints,
                                   policy_name="http (--llm http://x)"):
            got.append(result)
    assert sorted(r.task_id for r in got) == [t.id for t in TASKS]
    for result in got:
        assert result.interrupted and result.stats.iterations == 3  # three steps finished; the fourth died
        assert result.error == "the policy failed: http (--llm http://x): connection refused"
        assert len(result.tree.nodes) == 4 and all(n.observation for n in result.tree.nodes[1:])
        assert checkpoints.path(result.task_id).is_file()

    rerun = list(search_trees(TASKS, FakePolicy(SCRIPT), FakeSandbox, CONFIG, checkpoints=checkpoints))
    assert sorted(r.task_id for r in rerun) == [t.id for t in TASKS]
    for result in rerun:
        assert not result.interrupted and result.stats.resumes == 1
        assert result.stats.iterations == CONFIG.iterations and len(result.tree.nodes) == 7
    assert not checkpoints.folder.exists()  # every tree finished and was taken: nothing left behind


def test_an_interrupt_between_steps_returns_what_the_trees_had_and_raises_again(tmp_path):
    checkpoints = TreeCheckpoints(tmp_path / "checkpoints", every_s=1e9, settings=CONFIG.to_dict())

    def ctrl_c(step) -> None:
        if step.step == 2:
            raise KeyboardInterrupt

    got = []
    with pytest.raises(KeyboardInterrupt):
        for result in search_trees(TASKS[:2], FakePolicy(SCRIPT), FakeSandbox, CONFIG, checkpoints=checkpoints,
                                   on_step=ctrl_c):
            got.append(result)
    assert len(got) == 2
    assert all(r.interrupted and r.error is None and r.stats.iterations == 2 for r in got)
    assert all(checkpoints.load(t) is not None for t in TASKS[:2])


def test_a_finished_trees_checkpoint_stays_until_its_result_is_taken(tmp_path):
    config = CONFIG.replace(iterations=2, max_trees_in_flight=1)
    done = [("Task:", [code("set", "x = 1\nprint('x', x)")]), ("Observation:", [answer("@x[1]")])]
    checkpoints = TreeCheckpoints(tmp_path / "checkpoints", every_s=0.0, settings=config.to_dict())
    results = search_trees(TASKS[:2], FakePolicy(done), FakeSandbox, config, checkpoints=checkpoints)
    first = next(results)
    assert not first.interrupted and checkpoints.path(first.task_id).is_file()  # a kill now loses nothing
    second = next(results)
    assert not checkpoints.path(first.task_id).is_file() and checkpoints.path(second.task_id).is_file()
    results.close()  # the caller stopped before taking the next one: the file stays
    assert checkpoints.path(second.task_id).is_file()


def test_a_ray_worker_leaves_the_finished_trees_file_to_its_driver(tmp_path):
    config = CONFIG.replace(iterations=2, max_trees_in_flight=1)
    done = [("Task:", [code("set", "x = 1\nprint('x', x)")]), ("Observation:", [answer("@x[1]")])]
    checkpoints = TreeCheckpoints(tmp_path / "checkpoints", every_s=0.0, settings=config.to_dict())
    results = list(search_trees(TASKS[:2], FakePolicy(done), FakeSandbox, config, checkpoints=checkpoints,
                                discard_finished=False))
    assert [checkpoints.path(r.task_id).is_file() for r in results] == [True, True]
