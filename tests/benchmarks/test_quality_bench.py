"""The search-quality benchmark: the simulated policy, the report, and the script on tiny settings.

The policy tests are deterministic logic tests (no sandbox); the script runs the real engine, sandbox and
tables on 3 questions (the value-model arm, which trains the real Gemma backbone, is the slow test).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.quality.report import aggregate, targets
from benchmarks.quality.sim_policy import SimOptions, SimulatedPolicy, read_path
from benchmarks.quality.solutions import load_solutions, tasks_for
from benchmarks.quality.value_arm import split_halves
from jupiter.answers import reward
from jupiter.llm import PolicyError, SamplingParams
from jupiter.prompts import Turn, build_messages, parse_reply

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "quality" / "search_vs_baselines.py"


@pytest.fixture(scope="module")
def questions():
    return list(load_solutions().questions)


@pytest.fixture(scope="module")
def tasks(questions, dabench_dir: Path):
    return tasks_for(questions, dabench_dir)


def _texts(outs):
    return [[c.text for c in row] for row in outs]


def test_same_seed_same_samples_other_seed_other_samples(questions, tasks) -> None:
    policy = SimulatedPolicy(questions)
    histories = [build_messages(t) for t in tasks[:5]]
    first = policy.generate(histories, SamplingParams(n=6, seed=3))
    again = SimulatedPolicy(questions).generate(histories, SamplingParams(n=6, seed=3))
    assert first == again
    others = [_texts(policy.generate(histories, SamplingParams(n=6, seed=s))) for s in range(4, 9)]
    assert any(o != _texts(first) for o in others)


def test_samples_differ_per_sample_and_per_history_even_for_equal_histories(questions, tasks) -> None:
    policy = SimulatedPolicy(questions, SimOptions(p_switch=0.4, p_error=0.3))
    history = build_messages(tasks[0])
    outs = policy.generate([history] * 6, SamplingParams(n=8, seed=0))
    assert any(len(set(row)) > 1 for row in _texts(outs))  # siblings differ
    assert len({tuple(row) for row in _texts(outs)}) > 1  # equal histories in one batch do not stay clones


def test_follows_the_correct_solution_to_its_answer_without_noise(questions, tasks) -> None:
    policy = SimulatedPolicy(questions, SimOptions(p_switch=0.0, p_error=0.0))
    for question, task in list(zip(questions, tasks))[:6]:
        turns: list[Turn] = []
        for cell in question.correct.cells:
            (completion,), = policy.generate([build_messages(task, turns)], SamplingParams(n=1, seed=1))
            parsed = parse_reply(completion.text)
            assert parsed.code == cell.code and parsed.thought == cell.thought
            turns.append(parsed.to_turn(observation="ok"))
        (completion,), = policy.generate([build_messages(task, turns)], SamplingParams(n=1, seed=1))
        parsed = parse_reply(completion.text)
        assert parsed.answer == question.correct.answer
        assert reward(parsed.answer, question.label) == 1.0


def test_switches_to_wrong_solutions_and_errs_and_fixes(questions, tasks) -> None:
    question, task = questions[0], tasks[0]
    load = question.correct.cells[0]
    after_load = [Turn(load.thought, load.code, "ok")]
    switcher = SimulatedPolicy(questions, SimOptions(p_switch=1.0, p_error=0.0))
    codes = {parse_reply(c.text).code for c in
             switcher.generate([build_messages(task, after_load)], SamplingParams(n=20, seed=0))[0]}
    assert codes == {w.cells[1].code for w in question.wrong}  # starts a wrong solution after the shared load
    erring = SimulatedPolicy(questions, SimOptions(p_switch=0.0, p_error=1.0, p_fix=1.0))
    (reply,), = erring.generate([build_messages(task, after_load)], SamplingParams(n=1, seed=0))
    error = parse_reply(reply.text).code
    assert error in {c.code for c in question.errors}
    state = read_path(build_messages(task, after_load + [Turn("x", error, "KeyError")]), questions)
    assert state.last_was_error and state.current == 0
    (fixed,), = erring.generate([build_messages(task, after_load + [Turn("x", error, "KeyError")])],
                                SamplingParams(n=1, seed=0))
    assert parse_reply(fixed.text).code == question.correct.cells[1].code  # p_fix = 1: back on its solution


def test_a_wrong_path_stays_wrong_and_answers_what_its_cells_print(questions, tasks) -> None:
    question, task = questions[1], tasks[1]
    wrong = question.wrong[1]
    turns = [Turn(c.thought, c.code, "ok") for c in wrong.cells]
    state = read_path(build_messages(task, turns), questions)
    assert state.current == 2 and state.progress(wrong) == len(wrong.cells)
    policy = SimulatedPolicy(questions, SimOptions(p_switch=0.0, p_error=0.0))
    (reply,), = policy.generate([build_messages(task, turns)], SamplingParams(n=1, seed=5))
    assert parse_reply(reply.text).answer == wrong.answer


def test_reply_format_tokens_and_logprobs(questions, tasks) -> None:
    policy = SimulatedPolicy(questions)
    plain = policy.generate([build_messages(tasks[2])], SamplingParams(n=4, seed=1))[0]
    with_lp = policy.generate([build_messages(tasks[2])], SamplingParams(n=4, seed=1, logprobs=True))[0]
    for completion in plain:
        assert completion.text.startswith("Thought: ") and "Action:\n```python\n" in completion.text
        assert completion.finish_reason == "stop" and completion.mean_logprob is None
        assert completion.num_tokens == math.ceil(len(completion.text) / 4)
    assert all(c.mean_logprob is not None and c.mean_logprob < 0 for c in with_lp)
    assert policy.stats().completion_tokens == sum(c.num_tokens for c in plain + with_lp)


def test_unknown_task_is_a_policy_error(questions) -> None:
    from jupiter.task import Task

    with pytest.raises(PolicyError, match="no reference solutions"):
        SimulatedPolicy(questions).generate([build_messages(Task(id="x", question="What is 2+2?"))],
                                            SamplingParams(n=1, seed=0))


def test_one_rollout_is_right_well_under_half_the_time(questions, tasks) -> None:
    """Like the noisy policy it stands for (one ReAct rollout answered 14/40): offline rollouts (no cells run)
    with the default options."""
    policy = SimulatedPolicy(questions)
    outcomes: Counter[str] = Counter()
    errors = {q.id: {c.code for c in q.errors} for q in questions}
    for seed in range(3):
        for question, task in zip(questions, tasks):
            turns: list[Turn] = []
            for step in range(25):
                (reply,), = policy.generate([build_messages(task, turns)], SamplingParams(n=1, seed=seed * 100 + step))
                parsed = parse_reply(reply.text)
                if parsed.answer is not None:
                    outcomes["right" if reward(parsed.answer, question.label) == 1 else "wrong"] += 1
                    break
                turns.append(parsed.to_turn("Error" if parsed.code in errors[question.id] else "ok"))
            else:
                outcomes["none"] += 1
    share = outcomes["right"] / sum(outcomes.values())
    assert 0.2 <= share <= 0.45, outcomes


def test_halves_mix_levels_and_partition(tasks) -> None:
    first, second = split_halves(tasks)
    assert sorted(t.id for t in first + second) == sorted(t.id for t in tasks)
    assert abs(len(first) - len(second)) <= 1
    assert {t.level for t in first} == {t.level for t in second} == {"easy", "medium", "hard"}


def test_aggregate_and_targets() -> None:
    seeds = [{"react_acc": 0.3, "vote_acc": 0.5, "mcts_acc": 0.6, "mcts_vm_acc": None, "plurality_agreement": 1.0,
              "tokens": {"mcts": 100}},
             {"react_acc": 0.4, "vote_acc": 0.5, "mcts_acc": 0.4, "mcts_vm_acc": None, "plurality_agreement": 0.9,
              "tokens": {"mcts": 300}}]
    report = aggregate(seeds)
    assert report["react_acc"] == pytest.approx(0.35) and report["spread"]["react_acc"]["min"] == 0.3
    assert report["tokens"] == {"mcts": 200} and report["mcts_vm_acc"] is None
    assert report["mcts_vm_value_acc"] is None  # every headline key is reported, None where no mode made it
    with_value = aggregate([dict(seeds[0], mcts_vm_value_acc=0.5), dict(seeds[1], mcts_vm_value_acc=0.25)])
    assert with_value["mcts_vm_value_acc"] == pytest.approx(0.375)
    goals = targets(report)
    assert goals["mcts_ge_baselines"]["met"] and goals["mcts_ge_baselines"]["margin"] == 0.0
    assert goals["mcts_vm_gt_mcts_heldout"] is None
    assert goals["plurality_agreement_100"]["met"] is False


def _run(args: list[str], timeout: int) -> dict:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_epochs_become_steps_over_the_samples_kept_for_training() -> None:
    from benchmarks.quality.value_arm import TrainSettings, steps_for_epochs

    assert steps_for_epochs(256, 3, 4, 0.1) == 173  # 230 training samples, 3 passes of batches of 4
    assert steps_for_epochs(5, 0.1, 4, 0.5) == 1
    with pytest.raises(ValueError, match="epochs"):
        TrainSettings(epochs=0)


def test_a_rerun_reuses_finished_collection_and_training_only_when_they_match(tmp_path: Path) -> None:
    """The arm takes over an hour on CPU: a stopped run keeps its trees and model, but a model trained with
    another step budget, or whose folder is gone, is trained again."""
    from benchmarks.quality.value_arm import TrainSettings, TrainSummary, collected, finished_training
    from jupiter.task import Task

    tasks = [Task(id=str(i), question="q") for i in (3, 7)]
    trees = tmp_path / "collect"
    trees.mkdir()
    (trees / "3.json").write_text("{}")
    assert not collected(trees, tasks)
    (trees / "7.json").write_text("{}")
    assert collected(trees, tasks) and not collected(trees, [])

    value_dir = tmp_path / "value"
    assert finished_training(value_dir, TrainSettings(steps=40)) is None
    model = value_dir / "model"
    model.mkdir(parents=True)
    summary = TrainSummary(samples=256, positive=121, negative=131, train_samples=230, eval_samples=26, steps=173,
                           eval_mse_before=0.5, eval_mse_after=0.4, eval_spearman_after=0.2, seconds=1.0,
                           model_dir=str(model))
    (value_dir / "train_summary.json").write_text(json.dumps(summary.to_dict()))
    assert finished_training(value_dir, TrainSettings(epochs=3)) is None  # no model files yet
    (model / "value_config.json").write_text("{}")
    assert finished_training(value_dir, TrainSettings(epochs=3)) == summary  # 3 epochs of 256 samples: 173 steps
    assert finished_training(value_dir, TrainSettings(steps=40)) is None


@pytest.mark.parametrize("flags, message", [
    (["--device", "tpu"], "--device tpu: must be cpu or cuda"),
    (["--train-epochs", "0"], "--train-epochs: must be > 0"),
])
def test_bad_value_arm_flags_are_refused_before_any_search(flags: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", *flags], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and message in proc.stderr and proc.stdout == ""


def test_missing_dabench_data_is_refused_by_name(tmp_path: Path) -> None:
    """Without the tables every tree would fail at its first cell and the report would read as accuracy 0."""
    (tmp_path / "da-dev-questions.jsonl").write_text("")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", "--questions", "2", "--dabench", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert f"--dabench: {tmp_path}: tables/ lacks " in proc.stderr
    gone = tmp_path / "nowhere"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", "--dabench", str(gone)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and f"{gone}: folder not found" in proc.stderr


def test_cuda_without_a_gpu_is_refused_by_name() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", "--device", "cuda"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "--device cuda: no CUDA device" in proc.stderr


def test_sigterm_reports_the_finished_seeds(tmp_path: Path, dabench_dir: Path) -> None:
    """A stopped run writes the report of the seeds that finished (``interrupted``), then exits 130."""
    import signal
    import time

    out = tmp_path / "r.json"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--json", "--dabench", str(dabench_dir), "--questions", "2",
                             "--iterations", "3",
                             "--modes", "react", "--seeds", "0,1,2,3,4,5,6,7", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    partial = out.with_suffix(".partial.json")
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if partial.is_file() and json.loads(partial.read_text() or "{}").get("finished_seeds"):
                break
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-3000:]
    report = json.loads(stdout)
    saved = json.loads(out.read_text())
    assert report["interrupted"] is True and saved["interrupted"] is True
    assert 1 <= len(saved["settings"]["seeds"]) < 8 and saved["settings"]["seeds"][0] == 0
    assert len(saved["per_seed"]) == len(saved["settings"]["seeds"]) and report["react_acc"] is not None


MODE_KEYS = {"acc", "in_tree_rate", "tokens", "model_calls", "kernel_seconds", "wall_s"}


def test_script_on_tiny_settings_prints_its_keys(dabench_dir: Path) -> None:
    report = _run(["--dabench", str(dabench_dir), "--questions", "2", "--iterations", "6", "--no-value-model"],
                  timeout=600)
    for key in ("react_acc", "vote_acc", "mcts_acc", "mcts_vm_acc", "in_tree_rate", "tokens", "vote_eq_acc",
                "vote_eq_tokens", "plurality_agreement", "targets", "modes"):
        assert key in report
    assert set(report["modes"]) == {"react", "vote", "mcts", "vote_eq"}
    for name, summary in report["modes"].items():
        assert MODE_KEYS <= set(summary) and summary["questions"] == 2
        assert summary["errors"] == 0, f"{name}: trees that could not run: {summary}"
        assert summary["tokens"] > 0 and summary["model_calls"] >= 1, f"{name}: {summary}"
    assert set(report["tokens"]) == {"react", "vote", "mcts", "vote_eq"}
    assert report["mcts_vm_acc"] is None
    assert report["settings"]["solutions_verified"] is True
    assert report["settings"]["mcts_config"]["c_puct"] == 0.0
    assert report["settings"]["mcts_config"]["decision"] == "vote"


@pytest.mark.slow
def test_script_with_the_value_model_arm_and_two_seeds(tmp_path: Path, dabench_dir: Path) -> None:
    report = _run(["--dabench", str(dabench_dir), "--questions", "4", "--iterations", "6", "--collect-iterations", "16", "--train-steps", "2",
                   "--seeds", "0,1", "--out", str(tmp_path / "r.json"), "--workdir", str(tmp_path / "work")],
                  timeout=1800)
    assert report["mcts_vm_acc"] is not None and report["mcts_acc_heldout"] is not None
    value_acc = report["mcts_vm_value_acc"]  # the value decision on the same trees (None: no tree answered)
    assert value_acc is None or 0.0 <= value_acc <= 1.0
    assert report["train"]["steps"] == 2 and report["train"]["samples"] >= 4
    assert set(report["spread"]) >= {"react_acc", "mcts_acc", "mcts_vm_acc"}
    saved = json.loads((tmp_path / "r.json").read_text())
    assert len(saved["per_seed"]) == 2 and "outcomes" in saved["per_seed"][0]
    # the probe scores the trained model on the held-out half's states and on its own training samples
    model = tmp_path / "work" / "seed-0" / "value" / "model"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.quality.value_probe", "--json", "--model", str(model),
                           "--questions", "4", "--collect-iterations", "16", "--dabench", str(dabench_dir)],
                          capture_output=True, text=True, timeout=900, check=False, cwd=SCRIPT.parents[2])
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout)
    assert probe["held_out_question_ids"] and probe["training"]["all"]["samples"] == report["train"]["samples"]
    trained = probe["training"]["all"]
    assert trained["mse"] >= 0 and -1 <= trained["spearman"] <= 1
    assert trained["auc"] is None or 0 <= trained["auc"] <= 1
    # two held-out questions on tiny settings may give no labelled terminal at all: then the block says so
    held = probe["held_out"]["all"]
    assert held["samples"] == probe["held_out"]["terminal"]["samples"] + probe["held_out"]["intermediate"]["samples"]
    assert held["samples"] < 2 or (held["mse"] >= 0 and -1 <= held["spearman"] <= 1)


def test_probe_auc_and_report_blocks() -> None:
    from benchmarks.quality.value_probe import auc, rank_report
    from value_model.extract import Sample

    assert auc([0.9, 0.1, 0.5], [1, -1, 1]) == 1.0
    assert auc([0.1, 0.9], [1, -1]) == 0.0
    assert auc([0.5, 0.5], [1, -1]) == 0.5  # a tie counts half
    assert auc([0.3], [1]) is None
    samples = [Sample(messages=(), text="", value=v, visits=1, value_sum=v, is_terminal=t)
               for v, t in ((1.0, True), (-1.0, True), (0.5, False), (-0.5, False))]
    report = rank_report([0.8, -0.2, 0.1, 0.0], samples, train_mean=0.0)
    assert report["all"]["auc"] == 1.0 and report["all"]["positive"] == 2 and report["all"]["negative"] == 2
    assert report["terminal"]["samples"] == 2 and report["terminal"]["mse_constant"] == 1.0
    assert report["all"]["mse"] < report["all"]["mse_constant"]


def test_status_notebook_grows_the_same_trees_as_the_real_sandbox(questions, tasks) -> None:
    """The ablation notebook only knows which cells raise; the policy ignores observations, so trees match."""
    from benchmarks.quality.ablate import StatusNotebook
    from benchmarks.quality.runs import default_sandbox
    from benchmarks.quality.search_vs_baselines import mcts_config
    from search import solve_many

    config = mcts_config(iterations=6)
    picked, picked_tasks = questions[:2], tasks[:2]

    def shape(results):
        return sorted((r.task_id, tuple((n.tag, n.status.value, n.multiplicity, n.final_answer) for n in r.tree.nodes))
                      for r in results)

    stub = list(solve_many(picked_tasks, SimulatedPolicy(picked), lambda: StatusNotebook(picked), config, seed=4))
    with default_sandbox() as sandbox:
        real = list(solve_many(picked_tasks, SimulatedPolicy(picked), lambda: sandbox, config, seed=4,
                               close_sandboxes=False))
    assert shape(stub) == shape(real)
    assert any(n.status.value == "code-error" for r in real for n in r.tree.nodes)  # errors are in play


def test_ablation_runs_the_engine_over_settings(questions) -> None:
    from benchmarks.quality.ablate import run_variant, variants

    configs = variants(iterations=8)
    paper = configs["mcts (paper profile: c_puct 0, duplicates kept)"]
    assert (paper.c_puct, paper.drop_duplicates, paper.iterations) == (0.0, False, 8)
    assert configs["mcts, duplicates folded into one node"].drop_duplicates
    row = run_variant(questions[:6], paper, seed=0)
    assert 0.0 <= row["acc"] <= row["in_tree_rate"] <= 1.0 and row["tokens"] > 0
    assert row == run_variant(questions[:6], paper, seed=0)  # deterministic
