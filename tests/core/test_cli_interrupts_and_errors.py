"""The CLI loses nothing when it is stopped or fails, and names every mistake at once.

Every test runs the real command (``python -m jupiter.cli ...``) in a subprocess, with the real fork sandbox
and the replay policy (or the real HTTP backend against the scripted OpenAI-shaped server): Ctrl-C and
SIGTERM write what exists, a policy failure mid-search writes what exists, a rerun over an interrupted run
starts over and keeps the old files, bad ``--out`` paths fail before any work, "no answer" is said
plainly, and help texts show defaults.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from tests.llm.servers import ScriptedOpenAI

ROOT = Path(__file__).resolve().parents[2]
ANSWER = "@x[1]"


def step(seconds: float, tag: str = "slept") -> str:
    return (f"Thought: wait a little.\nAction:\n```python\nimport time\ntime.sleep({seconds})\n"
            f"print('{tag}')\n```")


FINAL = f"Thought: the output gives it.\nFormatted answer: {ANSWER}"


@pytest.fixture()
def task(tmp_path: Path) -> Path:
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"id": "newcomer-task", "question": "Wait, then answer.", "format": "@x[value]",
                                "label": ANSWER, "files": []}))
    return path


def replay(tmp_path: Path, replies: list[str], name: str = "replay.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"rules": [], "default": replies}))
    return path


def jupiter(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupiter.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _as_in_a_terminal() -> None:
    """Give the child the Ctrl-C of a command typed at a terminal. A test run started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Running:
    """A ``jupiter`` subprocess whose stderr (the progress bar) is read as it comes."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "jupiter.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, preexec_fn=_as_in_a_terminal)
        self.err = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        while chunk := os.read(self.proc.stderr.fileno(), 4096):
            self.err += chunk

    def wait_for_iterations(self, count: int, timeout: float = 90) -> None:
        """Block until the progress bar shows ``count`` finished iterations."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = [int(n) for n in re.findall(rb"\| *(\d+)/\d+ ", self.err)]
            if done and max(done) >= count:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"jupiter ended early ({self.proc.returncode}): {self.err.decode()[-2000:]}")
            time.sleep(0.05)
        self.proc.kill()
        raise AssertionError(f"no progress after {timeout} s: {self.err.decode()[-2000:]}")

    def finish(self, timeout: float = 90) -> tuple[int, str, str]:
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(timeout=5)
        assert self.proc.stdout is not None
        return self.proc.returncode, self.proc.stdout.read().decode(), self.err.decode()


def assert_outputs(out: Path) -> dict:
    for name in ("result.json", "tree.json", "tree.html", "solution.ipynb"):
        assert (out / name).is_file(), f"{name} missing in {sorted(p.name for p in out.iterdir())}"
    nbformat.validate(nbformat.read(str(out / "solution.ipynb"), as_version=4))
    assert "answer None" not in (out / "tree.html").read_text()
    return json.loads((out / "result.json").read_text())


# ----------------------------------------------------- Ctrl-C, SIGTERM and a failing policy write what exists


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_step_and_writes_what_exists(tmp_path, task, sig):
    # expansions 2: every expansion gives a slow cell (the tree goes on) and an answer (a best answer so far)
    script = replay(tmp_path, [step(0.5), FINAL])
    out = tmp_path / "run"
    run = Running("solve", str(task), "--llm", f"replay:{script}", "--iterations", "200", "--expansions", "2",
                  "--out", str(out))
    run.wait_for_iterations(2)
    run.proc.send_signal(sig)
    code, stdout, stderr = run.finish()
    assert code == 130, stderr[-2000:]
    assert f"{sig.name}: stopping the search after the current step" in stderr
    assert "Ctrl-C again to stop at once" in stderr
    assert "finished work is saved and a rerun resumes" not in stderr  # the old, untrue promise
    result = assert_outputs(out)
    assert result["interrupted"] is True and result["error"] is None
    assert result["answer"] == ANSWER and result["no_answer"] is False
    assert stdout.strip() == ANSWER
    assert 2 <= result["iterations"] < 200
    tree = json.loads((out / "tree.json").read_text())
    assert len(tree) == result["nodes"] >= 5  # root + two expansions of two


def test_a_second_ctrl_c_stops_at_once_and_still_writes(tmp_path, task):
    # the first step is quick; the second step's cell would sleep for ten minutes
    script = tmp_path / "replay.json"
    script.write_text(json.dumps({"rules": [{"match": "FIRST", "replies": [step(600, "never")]}],
                                  "default": [step(0.1, "FIRST")]}))
    out = tmp_path / "run"
    run = Running("solve", str(task), "--llm", f"replay:{script}", "--iterations", "50", "--expansions", "1",
                  "--out", str(out))
    run.wait_for_iterations(1)
    time.sleep(1.0)  # the 600 s cell is running now
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    run.proc.send_signal(signal.SIGINT)
    code, stdout, stderr = run.finish(timeout=90)  # far less than the cell: the cell's process was ended
    assert code == 130, stderr[-2000:]
    assert stderr.count("stopping the search after the current step") == 1
    result = assert_outputs(out)
    assert result["interrupted"] is True and result["iterations"] < 50
    assert result["no_answer"] is True and result["answer"] is None
    assert stdout.strip() == "no answer found"
    tree = json.loads((out / "tree.json").read_text())
    assert len(tree) == result["nodes"] == 2  # the root and the finished first step; the unfinished one dropped
    assert "FIRST" in tree[1]["observation"]


def test_a_policy_failure_mid_search_writes_what_exists(tmp_path, task):
    calls = []

    def reply(request: dict, index: int) -> str:
        calls.append(index)
        if len(calls) == 1:
            for _ in range(50):  # every later request fails (400 is not retried)
                server.fail_next(400, '{"error": "scripted failure"}')
        return step(0.1)

    server = ScriptedOpenAI(reply=reply).start()
    out = tmp_path / "run"
    try:
        done = jupiter("solve", str(task), "--llm", f"{server.url}#model=scripted-model", "--iterations", "10",
                       "--expansions", "1", "--out", str(out), "--no-progress")
    finally:
        server.stop()
    assert done.returncode == 2, done.stderr
    assert "the policy failed" in done.stderr and str(out) in done.stderr
    result = assert_outputs(out)
    assert result["interrupted"] is True and "the policy failed" in result["error"]
    assert result["nodes"] == 2  # the root and the one step that worked
    assert result["stats"]["prompt_tokens"] == 7  # the scripted server's usage, counted once


def test_a_rerun_over_an_interrupted_run_starts_over_and_keeps_its_files(tmp_path, task):
    out = tmp_path / "run"
    out.mkdir()
    (out / "result.json").write_text(json.dumps({"task_id": "newcomer-task", "interrupted": True}))
    (out / "tree.json").write_text("[]")
    done = jupiter("solve", str(task), "--llm", f"replay:{replay(tmp_path, [FINAL])}", "--iterations", "2",
                   "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "holds an interrupted run with no tree to continue" in done.stderr and "starting over" in done.stderr
    previous = [p for p in out.iterdir() if p.name.startswith("previous-")]
    assert len(previous) == 1 and {p.name for p in previous[0].iterdir()} == {"result.json", "tree.json"}
    assert json.loads((previous[0] / "result.json").read_text())["interrupted"] is True
    assert assert_outputs(out)["interrupted"] is False


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_rerun_continues_the_stopped_or_killed_tree(tmp_path, task, how):
    """Stopped cleanly or killed outright, a solve leaves its tree in OUT/checkpoints; the same command
    continues it: the old nodes stay, the counters go on, the old outputs move to previous-<time>/."""
    script = replay(tmp_path, [step(0.3), FINAL])
    out = tmp_path / "run"
    args = ("solve", str(task), "--llm", f"replay:{script}", "--iterations", "8", "--expansions", "2",
            "--checkpoint-every", "0", "--out", str(out))
    run = Running(*args)
    if how == "SIGKILL":
        checkpoint = out / "checkpoints" / "newcomer-task.json"
        deadline = time.monotonic() + 60
        while not checkpoint.is_file() or json.loads(checkpoint.read_text())["stats"]["iterations"] < 3:
            assert time.monotonic() < deadline and run.proc.poll() is None, run.err.decode()[-2000:]
            time.sleep(0.05)
        run.proc.kill()
        run.finish()
        assert not (out / "result.json").exists()
    else:
        run.wait_for_iterations(3)
        run.proc.send_signal(signal.SIGTERM)
        code, _, stderr = run.finish()
        assert code == 130 and "continues the search from its checkpoint" in stderr
    saved = json.loads((out / "checkpoints" / "newcomer-task.json").read_text())
    done = jupiter(*args, "--no-progress")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "holds an interrupted run; continuing its tree" in done.stderr
    result = assert_outputs(out)
    assert result["interrupted"] is False and result["iterations"] == 8 and result["stats"]["resumes"] == 1
    tree = {n["tag"]: n for n in json.loads((out / "tree.json").read_text())}
    assert all(tree[n["tag"]]["code"] == n["code"] for n in saved["tree"]["nodes"])
    assert len(tree) > len(saved["tree"]["nodes"])
    assert not (out / "checkpoints").exists()  # a finished search leaves no checkpoint (nor an empty folder)
    assert len([p for p in out.iterdir() if p.name.startswith("previous-")]) == 1


def test_ctrl_c_in_bench_keeps_finished_tasks_only_and_says_a_rerun_resumes(tmp_path, dabench_dir):
    if not (dabench_dir / "da-dev-questions.jsonl").is_file():
        pytest.skip(f"DABench data not found under {dabench_dir}")
    # the first question is answered at once; the second reaches its depth limit only after 11 one-second cells
    # (at 0.3 s a loaded machine let it finish before the Ctrl-C came)
    script = tmp_path / "replay.json"
    script.write_text(json.dumps({"rules": [{"match": "mean fare", "replies": [FINAL]}],
                                  "default": [step(1.0)]}))
    out = tmp_path / "bench"
    run = Running("bench", "dabench", "--data", str(dabench_dir), "--llm", f"replay:{script}", "--limit", "2",
                  "--iterations", "100", "--expansions", "1", "--concurrency", "1", "--no-trees", "--out", str(out))
    deadline = time.monotonic() + 90
    while not (out / "results.jsonl").is_file() or not (out / "results.jsonl").read_text().strip():
        assert time.monotonic() < deadline and run.proc.poll() is None, run.err.decode()[-2000:]
        time.sleep(0.1)
    time.sleep(1.5)  # the second question's tree is in the middle of its search
    run.proc.send_signal(signal.SIGINT)
    code, _, stderr = run.finish()
    assert code == 130, stderr[-2000:]
    assert "rerun the same command to resume" in stderr
    lines = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert [r["id"] for r in lines] == ["0"]  # the interrupted tree is not recorded as a finished task
    saved = json.loads((out / "checkpoints" / "5.json").read_text())  # ... but kept for the rerun to continue
    assert saved["task_id"] == "5" and len(saved["tree"]["nodes"]) >= 2
    assert not (out / "checkpoints" / "0.json").exists()


def test_a_killed_bench_run_continues_its_tree_from_the_checkpoint(tmp_path, dabench_dir):
    """SIGKILL (a session that ends, a lost machine) leaves no time to save: the tree in flight comes back from
    the checkpoint written as it grew, and the rerun finishes it with its states rebuilt by replay."""
    if not (dabench_dir / "da-dev-questions.jsonl").is_file():
        pytest.skip(f"DABench data not found under {dabench_dir}")
    script = tmp_path / "replay.json"
    script.write_text(json.dumps({"rules": [], "default": [step(0.5, "half a second")]}))
    out = tmp_path / "bench"
    args = ("bench", "dabench", "--data", str(dabench_dir), "--llm", f"replay:{script}", "--ids", "0",
            "--iterations", "6", "--expansions", "1", "--checkpoint-every", "0", "--no-progress", "--out", str(out))
    run = Running(*args)
    checkpoint = out / "checkpoints" / "0.json"
    deadline = time.monotonic() + 90
    while not checkpoint.is_file() or len(json.loads(checkpoint.read_text())["tree"]["nodes"]) < 3:
        assert time.monotonic() < deadline and run.proc.poll() is None, run.err.decode()[-2000:]
        time.sleep(0.05)
    run.proc.kill()
    run.finish()
    saved = json.loads(checkpoint.read_text())
    assert not (out / "results.jsonl").is_file() or not (out / "results.jsonl").read_text().strip()
    done = jupiter(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran 1 task(s) (1 continued from a checkpoint), skipped 0 already done" in done.stdout
    record = json.loads((out / "results.jsonl").read_text())
    assert record["id"] == "0" and record["stats"]["resumes"] == 1 and record["stats"]["iterations"] == 6
    tree = {n["tag"]: n for n in json.loads((out / "trees" / "0.json").read_text())}
    assert all(tree[n["tag"]]["code"] == n["code"] for n in saved["tree"]["nodes"])
    assert len(tree) == 7 and all(n["observation"].strip() == "half a second" for n in tree.values() if n["code"])
    assert not checkpoint.parent.exists()


# ----------------------------------------------------------------------- --out is checked before any work


def test_out_problems_fail_at_once_with_one_line(tmp_path, task):
    script = replay(tmp_path, [FINAL])
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("x")
    cases = [
        (["solve", str(task), "--llm", f"replay:{script}", "--out", str(a_file)], "is an existing file"),
        (["solve", str(task), "--llm", f"replay:{script}", "--out", "/proc/jupiter-newcomer"], "cannot create files"),
        (["value", "extract", str(task), "-o", str(tmp_path)], "is a folder"),
        (["value", "train", str(task), "--out", str(a_file)], "is an existing file"),
        (["nbqa", "filter", str(task), "--out", str(a_file)], "is an existing file"),
        (["bench", "compare", str(tmp_path), "--plot", str(tmp_path)], "is a folder"),
    ]
    for args, message in cases:
        done = jupiter(*args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, done.stderr)
        assert a_file.read_text() == "x"


def test_bench_out_is_checked_before_the_run(tmp_path, dabench_dir):
    if not (dabench_dir / "da-dev-questions.jsonl").is_file():
        pytest.skip(f"DABench data not found under {dabench_dir}")
    a_file = tmp_path / "a-file.txt"
    a_file.write_text("x")
    done = jupiter("bench", "dabench", "--data", str(dabench_dir), "--llm", "replay:none.json", "--limit", "1",
                   "--out", str(a_file))
    assert done.returncode == 2 and "is an existing file" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and a_file.read_text() == "x"


def test_a_finished_run_is_not_overwritten_without_force(tmp_path, task):
    script = replay(tmp_path, [FINAL])
    out = tmp_path / "run"
    args = ["solve", str(task), "--llm", f"replay:{script}", "--iterations", "2", "--out", str(out), "--no-progress"]
    assert jupiter(*args).returncode == 0
    before = (out / "result.json").read_text()
    refused = jupiter(*args)
    assert refused.returncode == 2
    assert "already holds a finished run" in refused.stderr and "--force" in refused.stderr
    assert (out / "result.json").read_text() == before
    forced = jupiter(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert not any(p.name.startswith("previous-") for p in out.iterdir())


# -------------------------------------------------------------------- "no answer" is said in every output


def test_no_answer_is_said_in_every_output(tmp_path, task):
    out = tmp_path / "run"
    done = jupiter("solve", str(task), "--llm", f"replay:{replay(tmp_path, [step(0.0)])}", "--iterations", "2",
                   "--expansions", "1", "--out", str(out), "--no-progress")
    assert done.returncode == 1 and done.stdout.strip() == "no answer found"
    result = assert_outputs(out)
    assert result["answer"] is None and result["no_answer"] is True
    assert result["solution_notebook"] == "solution.ipynb" and result["interrupted"] is False
    notebook = nbformat.read(str(out / "solution.ipynb"), as_version=4)
    assert notebook.cells[0].cell_type == "markdown" and "No answer found" in notebook.cells[0].source
    assert "no answer found" in (out / "tree.html").read_text()


def test_an_answer_names_its_notebook(tmp_path, task):
    out = tmp_path / "run"
    done = jupiter("solve", str(task), "--llm", f"replay:{replay(tmp_path, [FINAL])}", "--iterations", "2",
                   "--out", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    result = assert_outputs(out)
    assert result["no_answer"] is False and result["solution_notebook"] == "solution.ipynb"
    notebook = nbformat.read(str(out / "solution.ipynb"), as_version=4)
    assert "No answer found" not in notebook.cells[0].source


# ------------------------------------------------------------------------ the prompt tokens are reported


def _prompt_tokens(tmp_path: Path, task: Path, expansions: int) -> dict:
    out = tmp_path / f"run-{expansions}"
    done = jupiter("solve", str(task), "--llm", f"replay:{replay(tmp_path, [step(0.0)])}", "--iterations", "3",
                   "--expansions", str(expansions), "--out", str(out), "--no-progress")
    assert done.returncode == 1, done.stderr
    return json.loads((out / "result.json").read_text())


def test_solve_reports_prompt_tokens(tmp_path, task):
    result = _prompt_tokens(tmp_path, task, 1)
    assert result["stats"]["prompt_tokens"] is not None and result["stats"]["prompt_tokens"] > 0
    # one tree and one sample per expansion: the tree's count is the policy's
    assert result["stats"]["prompt_tokens"] == result["policy_stats"]["prompt_tokens"]


def test_solve_counts_a_shared_prompt_once_per_history(tmp_path, task):
    result = _prompt_tokens(tmp_path, task, 3)
    assert result["stats"]["prompt_tokens"] == result["policy_stats"]["prompt_tokens"]


# ----------------------------------------------------- unknown ids, missing files, defaults, unreachable servers


def test_score_warns_about_and_counts_unknown_ids(tmp_path):
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"id": i, "common_answers": [["a", "1"]]}) + "\n" for i in (1, 2, 3)))
    responses = tmp_path / "responses.jsonl"
    rows = [{"id": 1, "response": "@a[1]"}, {"id": "2", "response": "@a[1]"}]
    rows += [{"id": 100 + i, "response": "@a[1]"} for i in range(6)]
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = jupiter("score", "dabench", str(responses), "--labels", str(labels))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["unknown_ids"] == 7
    warning = done.stderr.strip().splitlines()
    assert len(warning) == 1 and "7 response id(s)" in warning[0] and '"2", 100, 101, 102, 103, ...' in warning[0]
    assert "104" not in warning[0] and "compared as written" in warning[0]
    assert out["answered"] == 1 and out["labels"] == 3
    assert out["abq"] == 1.0 and out["abq_all_labels"] == pytest.approx(1 / 3)


def test_a_missing_data_file_names_data_dir_and_where_it_looked(tmp_path):
    question = tmp_path / "q.json"
    question.write_text(json.dumps({"id": 7, "question": "Mean fare?", "file_name": "titanic.csv",
                                    "format": "@mean[value]"}))
    done = jupiter("solve", str(question), "--llm", "replay:none.json")
    assert done.returncode == 2
    assert "titanic.csv" in done.stderr and "--data-dir" in done.stderr and str(tmp_path) in done.stderr


@pytest.mark.parametrize("command, shown", [
    (["solve"], "(default: 0)"),  # --seed
    (["bench", "dabench"], "(default: infer)"),  # --mode
    (["bench", "dsbench"], "(default: 0)"),  # --seed
    (["value", "train"], "(default: 0.1)"),  # --lora-dropout
    (["value", "extract"], "(default: 4)"),  # --max-correct
    (["value", "score"], "(default: 8)"),  # --batch-size
])
def test_help_shows_defaults(command, shown):
    done = jupiter(*command, "--help")
    assert done.returncode == 0
    assert shown in done.stdout
    assert "(default: None)" not in done.stdout and "(default: False)" not in done.stdout


def test_the_interrupted_message_promises_a_resume_only_where_there_is_one(tmp_path, monkeypatch, capsys):
    from jupiter.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"id": 1, "common_answers": [["a", "1"]]}) + "\n")
    monkeypatch.setattr("jupiter.commands.score.score_dabench", interrupted)
    assert main(["score", "dabench", str(labels), "--labels", str(labels)]) == 130
    assert capsys.readouterr().err.strip() == "jupiter: interrupted"  # nothing is saved, nothing resumes

    monkeypatch.setattr("jupiter.commands.nbqa.run_filter", interrupted)
    assert main(["nbqa", "filter", str(labels), "--out", str(tmp_path / "f")]) == 130
    assert "rerun the same command to resume" in capsys.readouterr().err


def test_an_unreachable_model_server_fails_fast_with_one_line(tmp_path, task):
    """Nothing listens on the port: one quick retry, then exit 2 naming the URL (no back-off, no warnings)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = jupiter("solve", str(task), "--llm", f"http://127.0.0.1:{port}/v1#model=m", "--out",
                   str(tmp_path / "out"), "--iterations", "2", "--no-progress")
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and f"127.0.0.1:{port}" in errors[0] and "refused" in errors[0], done.stderr
    assert "WARNING" not in done.stderr and "retrying" not in done.stderr, done.stderr


def test_the_stop_message_bypasses_a_buffered_stream_the_signal_interrupted(monkeypatch):
    """The handler may run in the middle of the progress bar's write to stderr: writing through that buffered
    stream again raises "reentrant call", so the message goes to stderr's descriptor in one write."""
    from jupiter.commands.interrupts import StopSignals

    class MidWrite:  # a stream the signal caught inside a write
        def __init__(self, fd: int) -> None:
            self.fd = fd

        def fileno(self) -> int:
            return self.fd

        def write(self, text: str) -> int:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")

        def flush(self) -> None:
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")

    read, write = os.pipe()
    try:
        monkeypatch.setattr(sys, "stderr", MidWrite(write))
        signals = StopSignals("the search")
        signals._handle(signal.SIGINT, None)
        assert signals.requested
        assert b"SIGINT: stopping the search after the current step" in os.read(read, 4096)
    finally:
        os.close(read)
        os.close(write)
