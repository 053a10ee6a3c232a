"""DSBench scores every executed node that wrote ``submission.csv`` (the paper's rule), not only answer nodes.

A scripted search on a generated task in the official layout: the first cell writes a perfect submission, a
second cell only looks at it, a third overwrites it with a worse one, and only then does the model answer. The
answer submits the worse file, so the decision's figure is RMSE 2; the paper's figure (the best of every
submission written) is RMSE 0. Before the fix only the answer's file was scored and the perfect one was lost.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupiter.cli import main
from jupiter.task import read_jsonl

WRITE = """import pandas as pd
from sklearn.linear_model import LinearRegression
train, test = pd.read_csv('train.csv'), pd.read_csv('test.csv')
model = LinearRegression().fit(train[['x']], train['y'])
pd.DataFrame({'id': test['id'], 'y': model.predict(test[['x']]) + OFFSET}).to_csv('submission.csv', index=False)
print('wrote OFFSET')"""


def _cell(thought: str, code: str) -> str:
    return f"Thought: {thought}\nAction:\n```python\n{code}\n```"


def _setup(tmp_path: Path, make_task) -> tuple[Path, Path, Path]:
    """(data root, tasks.json, replay script) for the generated task and the scripted search."""
    root = tmp_path / "dsbench"
    make_task(root, "toy-regression")
    spec = {"name": "toy-regression", "value_col": "y", "gt": 0.0, "baseline": 4.0, "higher_is_better": False,
            "metric_line": "performance = np.sqrt(mean_squared_error(answers[args.value], predictions[args.value]))"}
    tasks_json = tmp_path / "tasks.json"
    tasks_json.write_text(json.dumps([spec]))
    script = {"rules": [
        {"match": "Competition page:", "replies": ["TOYTASK: predict y from x; write submission.csv with id,y; RMSE."]},
        {"match": "TOYTASK", "replies": [_cell("fit", WRITE.replace("OFFSET", "0.0"))]},
        {"match": "wrote 0.0", "replies": [_cell("look", "print(len(open('submission.csv').read()) > 0, 'looked')")]},
        {"match": "looked", "replies": [_cell("worse", WRITE.replace("OFFSET", "2.0"))]},
        {"match": "wrote 2.0", "replies": ["Thought: done\nFormatted answer: @submission_file[submission.csv]"]},
    ], "default": ["Thought: ?\nFormatted answer: @submission_file[submission.csv]"]}
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(script))
    return root, tasks_json, replay


def _run(tmp_path: Path, make_task, *extra: str) -> Path:
    root, tasks_json, replay = _setup(tmp_path, make_task)
    out = tmp_path / "run"
    assert main(["bench", "dsbench", "--data", str(root), "--tasks-json", str(tasks_json), "--llm", f"replay:{replay}",
                 "--iterations", "6", "--expansions", "1", "--out", str(out), "--no-progress", *extra]) == 0
    return out


def _assert_every_writer_scored(out: Path) -> None:
    record = read_jsonl(out / "results.jsonl")[0]
    subs = record["submissions"]
    assert [round(s["value"], 6) for s in subs] == [0.0, 2.0]  # the two writing cells; the looking cell is not one
    perfect, worse = subs
    assert perfect["answers"] == [] and len(worse["answers"]) == 1  # the answer submits the worse file
    assert record["answer_submissions"] == {worse["answers"][0]: worse["tag"]}
    assert worse["tag"].startswith(perfect["tag"] + ".")  # written later on the same path
    assert record["final"] == pytest.approx(2.0) and record["normalized_final"] == pytest.approx(0.5)
    assert record["best"] == pytest.approx(0.0, abs=1e-9) and record["normalized_best"] == pytest.approx(1.0)
    assert record["value_selected"] is None  # no value model: Q says nothing
    summary = json.loads((out / "summary.json").read_text())
    metrics = summary["metrics"]
    assert metrics["rpg_best"] == pytest.approx(1.0) and metrics["rpg_final"] == pytest.approx(0.5)
    assert metrics["success_rate_any"] == 1.0 and metrics["success_rate"] == 1.0
    assert summary["paper_figures"] == {"task_success": "metrics.success_rate_any", "rpg": "metrics.rpg_best"}
    assert summary["tasks"][0]["submissions"] == 2 and summary["tasks"][0]["scored"] == 2


def test_every_node_that_wrote_a_submission_is_scored(tmp_path, make_task):
    _assert_every_writer_scored(_run(tmp_path, make_task))


class _FavoursThePerfectFile:
    """A scripted value model (the search's ``Value`` protocol): high for the state right after the perfect
    submission was written, low elsewhere."""

    def evaluate(self, histories):
        return [0.9 if "wrote 0.0" in h[-1]["content"] else -0.5 for h in histories]


def test_value_selected_is_the_highest_q_writer(tmp_path, make_task):
    from benchmarks.dsbench import load_specs
    from benchmarks.runner import RunOptions
    from benchmarks.runs import load_dsbench, report_dsbench, run_dsbench
    from jupiter.llm import load_policy
    from search.profiles import resolve_profile

    root, tasks_json, replay = _setup(tmp_path, make_task)
    data = load_dsbench(root, load_specs(tasks_json))
    config = resolve_profile("paper", "infer", iterations=6, max_depth=25, expansions=1)
    options = RunOptions(out_dir=tmp_path / "run", progress=False, save_trees=False)
    outcome = run_dsbench(data, load_policy(f"replay:{replay}"), config, options, value=_FavoursThePerfectFile())
    record = outcome.records[0].extra
    assert record["value_selected"] == pytest.approx(0.0, abs=1e-9) and record["normalized_value"] == 1.0
    assert record["final"] == pytest.approx(2.0)  # the only answer still submits the worse file
    assert report_dsbench(options.out_dir, data)["metrics"]["rpg_value"] == pytest.approx(1.0)


@pytest.mark.slow
def test_ray_workers_send_back_every_written_submission(tmp_path, make_task, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    _assert_every_writer_scored(_run(tmp_path, make_task, "--ray"))


def test_capture_tells_writers_from_inheritors_in_a_real_sandbox(tmp_path):
    """The capture reads the file after every cell, in the cell's own state: a branch inherits the file without
    writing it; rewriting other bytes makes a writer; identical bytes do not."""
    from types import SimpleNamespace

    from sandbox import Sandbox, SandboxConfig
    from search.file_capture import CapturingSandbox, SubmissionCapture, submission_files, writer_nodes

    def node(tag, parent, state, code, answer=False):
        return SimpleNamespace(tag=tag, parent=parent, execution=state.run(code) if code else None,
                               is_answer=answer, is_infrastructure_failure=False)

    capture = SubmissionCapture()
    with Sandbox(SandboxConfig()) as inner:
        box = CapturingSandbox(inner, capture)
        root_state = box.open_root()
        root = SimpleNamespace(tag="0", parent=None, execution=None, is_answer=False, is_infrastructure_failure=False)
        a_state = root_state.branch()
        a = node("0.0", root, a_state, "open('submission.csv', 'w').write('id,y\\n1,2\\n')")
        b_state = a_state.branch()
        b = node("0.0.0", a, b_state, "print('no write')")
        c_state = b_state.branch()
        c = node("0.0.0.0", b, c_state, "open('submission.csv', 'w').write('id,y\\n1,3\\n')")
        d_state = c_state.branch()
        d = node("0.0.0.0.0", c, d_state, "open('submission.csv', 'w').write('id,y\\n1,3\\n')")  # same bytes
        answer = node("0.0.0.0.0.0", d, d_state, None, answer=True)
        a_state.close()  # released states keep what was captured
        nodes = [root, a, b, c, d, answer]
        assert [n.tag for n in writer_nodes(capture, nodes)] == ["0.0", "0.0.0.0"]
        files = submission_files(capture, nodes)
        assert files == {"0.0": b"id,y\n1,2\n", "0.0.0.0": b"id,y\n1,3\n", "0.0.0.0.0.0": b"id,y\n1,3\n"}
        assert files["0.0.0.0"] is files["0.0.0.0.0.0"]  # one bytes object per distinct file
        capture.forget(nodes)
        assert submission_files(capture, nodes) == {}
