"""A policy that dies mid-run: the command says so in one line, exits non-zero, records the failure, resumes.

Two real backends die here: the HTTP policy against a real OpenAI-shaped server on 127.0.0.1 that starts
answering errors after a few requests, and the replay policy made to raise the way the CPU vLLM engine did
(``RuntimeError: CPU Generator does not use offset``) after N calls. The sandbox is the real fork sandbox.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from jupiter.cli import main
from jupiter.llm import PolicyError, SamplingParams
from jupiter.llm.replay import ReplayPolicy
from jupiter.task import read_jsonl


def _servers_module():
    """``tests/llm/servers.py`` by path: a top-level ``tests`` package installed by a dependency can shadow
    this repository's ``tests`` folder."""
    try:
        from tests.llm import servers
    except ImportError:
        spec = importlib.util.spec_from_file_location("jupiter_test_servers",
                                                      Path(__file__).resolve().parents[1] / "llm" / "servers.py")
        servers = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = servers
        spec.loader.exec_module(servers)
    return servers


ScriptedOpenAI = _servers_module().ScriptedOpenAI

QUESTIONS = 4
CALLS_PER_QUESTION = 2  # load the table, then answer


def _questions(bench_shared: Path) -> list[dict]:
    return read_jsonl(bench_shared / "dabench" / "da-dev-questions.jsonl")[:QUESTIONS]


def _script(bench_shared: Path) -> dict:
    """Replay rules: each question loads its table (a real cell), then answers."""
    rules = []
    for q in _questions(bench_shared):
        code = f"import pandas as pd\ndf = pd.read_csv({q['file_name']!r})\nprint('q{q['id']} rows', len(df))"
        rules.append({"match": q["question"][:60], "replies": [f"Thought: load\nAction:\n```python\n{code}\n```"]})
        rules.append({"match": f"q{q['id']} rows", "replies": ["Thought: done\nFormatted answer: @answer[1]"]})
    return {"rules": rules, "default": ["Thought: lost\nFormatted answer: @x[0]"]}


def _http_reply(policy: ReplayPolicy):
    """The scripted server answers what the replay script would (the last user turn picks the rule)."""

    def reply(request: dict, index: int) -> str:
        messages = request.get("messages") or [{"role": "user", "content": request.get("prompt", "")}]
        return policy.generate([messages], SamplingParams(max_tokens=64))[0][0].text

    return reply


def _bench(*args: str) -> list[str]:
    return ["bench", "dabench", "--iterations", "3", "--expansions", "1", "--concurrency", "1", "--no-progress",
            "--limit", str(QUESTIONS), *args]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("jupiter bench: error:")]


def test_a_server_that_starts_failing_mid_run_is_reported_recorded_and_resumed(bench_shared, tmp_path, capsys):
    script = _script(bench_shared)
    answers = ReplayPolicy(**script)
    replies = _http_reply(answers)
    served: list[int] = []

    def reply(request: dict, index: int) -> str:
        served.append(index)
        if len(served) == CALLS_PER_QUESTION * 2:  # two questions done: every later request fails (400: no retry)
            for _ in range(100):
                server.fail_next(400, '{"error": "scripted: the model crashed"}')
        return replies(request, index)

    server = ScriptedOpenAI(reply=reply).start()
    out = tmp_path / "run"
    llm = f"{server.url}#model=scripted-model&mode=chat"
    try:
        code = main(_bench("--llm", llm, "--out", str(out)))
    finally:
        server.stop()
    stderr = capsys.readouterr().err

    assert code == 1
    [line] = _error_lines(stderr)
    assert "the policy backend http" in line and llm in line  # names the backend
    assert "400" in line and "scripted: the model crashed" in line  # and the cause
    assert "2 of 4 task(s) finished, 2 unfinished" in line and str(out / "failure.json") in line

    ids = [str(q["id"]) for q in _questions(bench_shared)]
    failure = json.loads((out / "failure.json").read_text())
    assert failure["source"] == "policy" and failure["backend"].startswith("http")
    assert failure["finished"] == ids[:2] and failure["unfinished"] == ids[2:]
    assert "PolicyResponseError" in failure["error"] and "Traceback" in failure["traceback"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["finished"] == 2 and summary["selected"] == 4
    assert summary["unfinished"] == ids[2:] and "400" in summary["failure"]["error"]
    markdown = (out / "summary.md").read_text()
    assert "**Run failed**" in markdown and "2 of 4 selected tasks" in markdown

    # the same command against a working server searches only the two unfinished questions
    seen: list[str] = []

    def working(request: dict, index: int) -> str:
        seen.append("\n".join(m["content"] for m in request["messages"]))
        return replies(request, index)

    server = ScriptedOpenAI(reply=working).start()
    try:
        code = main(_bench("--llm", f"{server.url}#model=scripted-model&mode=chat", "--out", str(out)))
    finally:
        server.stop()
    capsys.readouterr()
    assert code == 0
    assert len(seen) == 2 * CALLS_PER_QUESTION
    questions = _questions(bench_shared)
    assert all(any(q["question"][:60] in s for s in seen) for q in questions[2:])
    assert not any(q["question"][:60] in s for s in seen for q in questions[:2])
    assert not (out / "failure.json").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["finished"] == 4 and summary["unfinished"] == []
    assert "Run failed" not in (out / "summary.md").read_text()


class CrashingReplay(ReplayPolicy):
    """The replay policy whose engine dies after ``calls`` generate calls, as vLLM's CPU build did."""

    def __init__(self, script: dict, calls: int) -> None:
        super().__init__(**script)
        self.calls = calls

    def _generate(self, histories, params):
        if self.calls <= 0:
            raise RuntimeError("CPU Generator does not use offset")
        self.calls -= 1
        return super()._generate(histories, params)


def test_a_backend_crash_in_aime_is_one_line_and_a_failure_record(bench_shared, tmp_path, capsys, monkeypatch):
    from jupiter.commands import bench

    if not (bench_shared / "aime2025").is_dir():
        pytest.skip("AIME data not found")
    script = {"default": ["Thought: compute\nAction:\n```python\nprint(6 * 7)\n```"]}
    monkeypatch.setattr(bench, "load_policy", lambda spec: CrashingReplay(script, calls=1))
    out = tmp_path / "aime"
    code = main(["bench", "aime", "--llm", "replay:crashing", "--limit", "2", "--iterations", "2", "--expansions", "1",
                 "--concurrency", "2", "--no-progress", "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 1
    [line] = _error_lines(stderr)
    assert "the policy backend replay (--llm replay:crashing) failed" in line
    assert "RuntimeError: CPU Generator does not use offset" in line and "0 of 2 task(s) finished" in line
    assert f"what the backend and other programs printed: {out / 'jupiter.log'}" in stderr  # its own words
    assert (out / "jupiter.log").is_file()
    failure = json.loads((out / "failure.json").read_text())
    assert failure["source"] == "policy" and failure["cause"] == "RuntimeError: CPU Generator does not use offset"
    assert len(failure["unfinished"]) == 2 and failure["finished"] == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["finished"] == 0 and len(summary["unfinished"]) == 2


def test_the_driver_names_the_backend_of_any_crash(bench_shared):
    """Whatever a backend raises reaches the caller as a PolicyError naming it, the original chained."""
    from jupiter.task import Task
    from search import config_for_mode
    from search.driver import solve_many

    policy = CrashingReplay({"default": ["Thought: x\nFormatted answer: 1"]}, calls=0)
    task = Task(id="t", question="What is 6 * 7?")
    with pytest.raises(PolicyError, match="replay policy failed: RuntimeError: CPU Generator") as caught:
        list(solve_many([task], policy, _no_sandbox, config_for_mode("react", iterations=1)))
    assert isinstance(caught.value.__cause__, RuntimeError)


def _no_sandbox():
    from sandbox import Sandbox, SandboxConfig

    return Sandbox(SandboxConfig(timeout_s=30))


def test_jupiter_solve_names_the_backend_and_keeps_the_tree(tmp_path, capsys, monkeypatch):
    from jupiter.commands import solve

    task = tmp_path / "task.json"
    task.write_text(json.dumps({"id": "six-sevens", "question": "What is 6 * 7?"}))
    script = {"default": ["Thought: compute\nAction:\n```python\nprint(6 * 7)\n```"]}
    monkeypatch.setattr(solve, "load_policy", lambda spec: CrashingReplay(script, calls=1))
    out = tmp_path / "solve"
    code = main(["solve", str(task), "--llm", "replay:crashing", "--iterations", "4", "--expansions", "1",
                 "--no-progress", "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 2
    [line] = [x for x in stderr.splitlines() if x.startswith("jupiter: error:")]
    assert "the policy failed: replay (--llm replay:crashing)" in line
    assert "RuntimeError: CPU Generator does not use offset" in line and str(out) in line
    result = json.loads((out / "result.json").read_text())
    assert result["interrupted"] is True and "CPU Generator does not use offset" in result["error"]
    assert result["nodes"] == 2  # the root and the one step that worked


def test_a_ray_batch_with_failed_trees_is_one_line_from_the_manifest(tmp_path):
    from jupiter.commands.solve import _ray_failure_line
    from search.ray_manifest import DeathCause, Manifest, ManifestRecord, TaskStatus

    manifest = Manifest(tmp_path)
    manifest.append(ManifestRecord(task_id="a", status=TaskStatus.OK, attempt=1))
    manifest.append(ManifestRecord(task_id="b", status=TaskStatus.GAVE_UP, attempt=3, cause=DeathCause.OUT_OF_MEMORY,
                                   error="worker killed\nby the memory monitor"))
    line = _ray_failure_line(tmp_path, ["a", "b", "c"], "vllm:default")
    assert "\n" not in line
    assert line.startswith("2 of 3 task(s) did not finish on Ray (--llm vllm:default); first: b: gave_up "
                           "(out_of_memory): worker killed by the memory monitor")
    assert str(manifest.path) in line


def test_the_search_context_budget_is_capped_at_the_policy_window():
    """A history longer than an engine's window fails the whole batched call: paths must end before it."""
    from jupiter.commands.bench import _fit_context
    from search import config_for_mode

    config = config_for_mode("react", max_tokens=512)
    windowed = CrashingReplay({"default": ["x"]}, calls=1)
    windowed.context_window = 4096
    assert _fit_context(config, windowed).context_limit == 4096
    assert _fit_context(config, CrashingReplay({"default": ["x"]}, calls=1)) is config  # no window: unchanged
    windowed.context_window = 10**6
    assert _fit_context(config, windowed) is config  # a larger window never raises the budget


def test_a_crash_while_simplifying_dsbench_tasks_is_recorded_too(dsbench_root, tmp_path, capsys, monkeypatch):
    """The policy's first DSBench call (the task simplification) comes before any tree: still one line, exit 1,
    a failure record and a failed report."""
    from jupiter.commands import bench

    spec = {"name": "toy-regression", "value_col": "y", "gt": 0.0, "baseline": 4.0, "higher_is_better": False,
            "metric_line": "performance = np.sqrt(mean_squared_error(answers[args.value], predictions[args.value]))"}
    tasks_json = tmp_path / "tasks.json"
    tasks_json.write_text(json.dumps([spec]))
    monkeypatch.setattr(bench, "load_policy", lambda spec: CrashingReplay({"default": ["x"]}, calls=0))
    out = tmp_path / "ds"
    code = main(["bench", "dsbench", "--data", str(dsbench_root), "--tasks-json", str(tasks_json), "--llm",
                 "replay:crashing", "--iterations", "2", "--no-progress", "--out", str(out)])
    stderr = capsys.readouterr().err
    assert code == 1
    [line] = _error_lines(stderr)
    assert "the policy backend replay (--llm replay:crashing) failed" in line and "0 of 1 task(s) finished" in line
    failure = json.loads((out / "failure.json").read_text())
    assert failure["unfinished"] == ["toy-regression"] and failure["cause"].startswith("RuntimeError: CPU Generator")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["unfinished"] == ["toy-regression"]
