"""A half-searched tree saved by a stopped run continues where it was: same nodes, counters going on, and the
states of its leaves rebuilt by replaying their paths' cells (real sandbox), or eagerly on a sandbox that
cannot restore lazily."""

from __future__ import annotations

import json
import re

from search_fakes import FakePolicy, FakeSandbox, answer, code

from jupiter.task import Task
from sandbox import Sandbox, SandboxConfig
from search import Mode, SearchConfig, run_search
from search.checkpoints import SavedSearch, TreeCheckpoints
from search.driver import recorded_cells
from search.tree import NodeStatus

TASK = Task(id="twice", question="What is twice the base?", format="@y[value]", label="@y[42]")
SCRIPT = [
    ("Task:", [code("set", f"x = {x}\nprint('set', x)") for x in (21, 20)]),
    ("Observation:\nset", [code("double", "y = 2 * x\nprint('double', y)"),
                           code("triple", "y = 3 * x\nprint('triple', y)")]),
    ("Observation:\ndouble", [code("sum", "print('sum', x + y)")]),
    ("Observation:\ntriple", [code("sum", "print('sum', x + y)")]),
    ("Observation:\nsum", [answer("@y[42]")]),
]
CONFIG = SearchConfig(mode=Mode.COLLECT, iterations=15, expansions=2)  # 1 + 2 + 4 + 8 expansions: the whole tree


def _stopped_after(steps: int, sandbox) -> object:
    policy = FakePolicy(SCRIPT)
    result = run_search(TASK, policy, sandbox, CONFIG, stop=lambda _id: len(policy.calls) >= steps)
    assert result.interrupted and result.stats.iterations == steps
    return result


def _expected(node) -> str:
    """What a cell prints in the state of its own path (x from depth 1, y from depth 2)."""
    cells = [n.code for n in node.path()[1:]]
    x = int(re.search(r"x = (\d+)", cells[0]).group(1))
    y = None if len(cells) < 2 else x * (2 if "2 * x" in cells[1] else 3)
    if len(cells) == 1:
        return f"set {x}"
    if len(cells) == 2:
        return f"{'double' if '2 * x' in cells[1] else 'triple'} {y}"
    return f"sum {x + y}"


def test_a_saved_tree_continues_in_a_new_sandbox_with_its_leaves_replayed(tmp_path):
    with Sandbox(SandboxConfig(timeout_s=60)) as first_box:
        first = _stopped_after(2, first_box)
    checkpoints = TreeCheckpoints(tmp_path / "checkpoints")
    checkpoints.save(TASK.id, first.tree, first.stats)
    saved_nodes = {n.tag: (n.code, n.observation) for n in first.tree.nodes}
    saved_leaves = {n.tag for n in first.tree.nodes if n.expandable and n.depth >= 1}
    saved = checkpoints.load(TASK)
    assert saved is not None and saved.stats.iterations == 2

    policy = FakePolicy(SCRIPT)
    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        result = run_search(TASK, policy, box, CONFIG, saved=saved)
        replays = box.stats().replays
    tree = result.tree
    assert not result.interrupted and result.stats.iterations == CONFIG.iterations
    assert result.stats.resumes == 1 and result.stats.model_calls == first.stats.model_calls + len(policy.calls)
    assert {n.tag: (n.code, n.observation) for n in tree.nodes if n.tag in saved_nodes} == saved_nodes
    new = [n for n in tree.nodes[len(saved_nodes):] if n.status is NodeStatus.CODE_OK]
    continued = {n.parent.tag for n in new if n.parent.tag in saved_nodes and n.parent.depth >= 1}
    assert len(saved_leaves) == 3 and continued == saved_leaves and replays >= len(continued)
    assert [n.depth for n in new].count(3) == 8
    for node in new:  # every new cell ran in the state of its own path
        assert node.observation.strip() == _expected(node)
    assert not any(n.expandable for n in tree.nodes) and result.answer == "@y[42]"


def test_a_sandbox_without_lazy_restore_gets_the_cells_replayed_at_once():
    first = _stopped_after(2, FakeSandbox())
    replayed = sum(len(recorded_cells(n)) for n in first.tree.nodes if n.expandable and n.depth >= 1)
    saved = len(first.tree.nodes)
    sandbox = FakeSandbox()
    result = run_search(TASK, FakePolicy(SCRIPT), sandbox, CONFIG, saved=SavedSearch(first.tree, first.stats, ""))
    new_cells = sum(1 for n in result.tree.nodes[saved:] if n.code is not None)
    assert replayed == 5 and sandbox.cells == replayed + new_cells  # one depth-1 leaf, two depth-2 leaves
    assert result.stats.iterations == CONFIG.iterations and result.stats.resumes == 1
    assert all(n.observation.strip() == _expected(n) for n in result.tree.nodes if n.status is NodeStatus.CODE_OK)


def test_checkpoints_save_at_most_every_interval_and_skip_unusable_files(tmp_path, caplog):
    first = _stopped_after(2, FakeSandbox())
    checkpoints = TreeCheckpoints(tmp_path, every_s=3600)

    class Update:
        task_id, tree, stats = TASK.id, first.tree, first.stats

    checkpoints.on_update(Update)
    written = checkpoints.path(TASK.id).read_text()
    first.stats.iterations += 1
    checkpoints.on_update(Update)  # within the interval: not written again
    assert checkpoints.path(TASK.id).read_text() == written
    assert json.loads(written)["stats"]["iterations"] == 2
    checkpoints.discard(TASK.id)
    assert checkpoints.load(TASK) is None and not checkpoints.path(TASK.id).exists()

    other = Task(id="other", question="?", format="@y[value]")
    checkpoints.save(other.id, first.tree, first.stats)
    checkpoints.path(other.id).rename(checkpoints.path(TASK.id))  # another task's tree under this task's name
    assert checkpoints.load(TASK) is None
    assert (tmp_path / "twice.json.bad").is_file() and "holds task 'other'" in caplog.text
    checkpoints.path(TASK.id).write_text("{not json")
    assert checkpoints.load(TASK) is None and "cannot resume from it" in caplog.text


def test_a_tree_continues_only_under_the_settings_that_grew_it(tmp_path, caplog):
    first = _stopped_after(2, FakeSandbox())
    TreeCheckpoints(tmp_path, settings=CONFIG.to_dict()).save(TASK.id, first.tree, first.stats)
    longer = TreeCheckpoints(tmp_path, settings={**CONFIG.to_dict(), "iterations": 40, "max_trees_in_flight": 2})
    assert longer.load(TASK) is not None  # a bigger budget, or other execution knobs: it continues
    other = TreeCheckpoints(tmp_path, settings={**CONFIG.to_dict(), "c_puct": 0.0, "mode": "infer"})
    assert other.load(TASK) is None
    assert "starts over: its tree was grown with other settings (c_puct: 1.25 -> 0.0; mode: 'collect' -> 'infer')" \
        in caplog.text
    assert other.path(TASK.id).is_file()  # kept: the new tree replaces it as it grows


def test_a_tree_saved_right_after_opening_starts_from_its_root():
    """A checkpoint written when the tree opened (no step yet) resumes like a fresh search."""
    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        policy = FakePolicy(SCRIPT)
        opened = run_search(TASK, policy, box, CONFIG, stop=lambda _id: True)
        assert len(opened.tree.nodes) == 1
        result = run_search(TASK, FakePolicy(SCRIPT), box, CONFIG, saved=SavedSearch(opened.tree, opened.stats, ""))
    assert result.stats.iterations == CONFIG.iterations and result.answer == "@y[42]"


def test_a_step_cut_by_ctrl_c_is_not_counted_so_the_continued_tree_spends_it_again():
    class CutOnThirdCall(FakePolicy):
        def generate(self, histories, params):
            if len(self.calls) == 2:
                raise KeyboardInterrupt
            return super().generate(histories, params)

    cut = run_search(TASK, CutOnThirdCall(SCRIPT), FakeSandbox(), CONFIG)
    expanded = sum(1 for n in cut.tree.nodes if n.expanded)
    assert cut.interrupted and cut.stats.iterations == expanded == 2
    result = run_search(TASK, FakePolicy(SCRIPT), FakeSandbox(), CONFIG,
                        saved=SavedSearch(cut.tree, cut.stats, ""))
    assert result.stats.iterations == CONFIG.iterations == sum(1 for n in result.tree.nodes if n.expanded)
