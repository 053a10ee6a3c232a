"""Fast ablations of the search on the simulated policy: which setting makes a tree miss the plurality?

The simulated policy ignores what cells print; only whether a cell raised matters to the search (error counts,
dead branches). ``StatusNotebook`` reproduces exactly that without running anything: a cell is an error when it
is one of the question's verified erroring cells (``verify`` checks that those raise and that every solution cell
runs), OK otherwise. With it the real engine (``search.solve_many``) grows the same trees as with the real
sandbox — the policy's seed leaves observations out, so the draws are identical (``tests/benchmarks`` checks
trees on both) — in milliseconds, so many seeds and settings can be compared. Never a stand-in for the
benchmark itself: ``search_vs_baselines.py`` runs the real sandbox.

    python -m benchmarks.quality.ablate [--seeds 0,1,2,3,4] [--iterations 40] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from jupiter.answers import reward
from sandbox import ExecStatus
from search import SearchConfig, SearchResult, react_config, solve_many, vote_config

from benchmarks.paths import default_data_dir
from benchmarks.quality.runs import outcome_of
from benchmarks.quality.sim_policy import SimulatedPolicy
from benchmarks.quality.solutions import QuestionSolutions, load_solutions, tasks_for

__all__ = ["StatusNotebook", "variants", "run_variant", "main"]


@dataclass(frozen=True)
class _Execution:
    status: ExecStatus
    outputs: tuple = ()

    @property
    def ok(self) -> bool:
        return self.status is ExecStatus.OK

    def observation(self, max_chars: int | None = None) -> str:
        return "" if self.ok else "Error"


class _State:
    def __init__(self, errors: frozenset[str]) -> None:
        self.errors = errors

    def branch(self) -> "_State":
        return _State(self.errors)

    def run(self, code: str, timeout: float | None = None) -> _Execution:
        return _Execution(ExecStatus.ERROR if code in self.errors else ExecStatus.OK)

    def close(self) -> None:
        pass


class StatusNotebook:
    """A notebook that only knows which cells raise (the questions' verified erroring cells)."""

    def __init__(self, questions: Sequence[QuestionSolutions]) -> None:
        self.errors = frozenset(cell.code for q in questions for cell in q.errors)

    def open_root(self, input_files: Sequence[Any] = ()) -> _State:
        return _State(self.errors)

    def close(self) -> None:
        pass


def variants(iterations: int) -> dict[str, SearchConfig]:
    """The paper's inference settings and the single changes that test a cause each.

    Voting gets as many runs as spend about the tree's tokens (``vote_eq_runs``: a tree spends about 2 runs'
    worth per 10 iterations on this policy; measured, ``tokens`` in the report).
    """
    from benchmarks.quality.search_vs_baselines import mcts_config

    paper = mcts_config(iterations=iterations)
    eq_runs = max(5, round(iterations / 2))
    return {
        "react": react_config(),
        "vote": vote_config(),
        f"vote, {eq_runs} runs (about the tokens of mcts)": vote_config(runs=eq_runs),
        "mcts (paper profile: c_puct 0, duplicates kept)": paper,
        "mcts, duplicates folded into one node": paper.replace(drop_duplicates=True),
        "mcts, c_puct 1.25 + exp prior": paper.replace(c_puct=1.25),
        "mcts, c_puct 1.25 + uniform prior": paper.replace(c_puct=1.25, prior_rule="uniform"),
        "mcts, per-child zero back-up": paper.replace(backup_rule="per-child"),
        f"mcts, {iterations // 2} iterations": paper.replace(iterations=iterations // 2),
        "mcts, 3 leaves per step": paper.replace(leaves_per_step=3),
    }


def run_variant(questions: Sequence[QuestionSolutions], config: SearchConfig, seed: int) -> dict[str, Any]:
    """Accuracy, in-tree rate and the right answer's share of the votes for one setting and seed."""
    from benchmarks.quality.search_vs_baselines import ordered_questions

    questions = ordered_questions(questions, None)  # the benchmark's order: same batches, same draws
    tasks = tasks_for(questions, default_data_dir("dabench"))
    policy = SimulatedPolicy(questions)
    notebook = StatusNotebook(questions)
    results: list[SearchResult] = list(solve_many(tasks, policy, lambda: notebook, config, seed=seed,
                                                  close_sandboxes=False))
    outcomes = [outcome_of(r) for r in results]
    votes = right = 0
    for result in results:
        for node in result.tree.answers():
            m = max(1, int(node.multiplicity))
            votes += m
            right += m * (reward(node.final_answer, result.tree.task.label) == 1.0)
    n = len(outcomes)
    return {"acc": sum(o.correct for o in outcomes) / n, "in_tree_rate": sum(o.in_tree for o in outcomes) / n,
            "right_vote_share": right / votes if votes else None,
            "plurality_agreement": sum(bool(o.agrees_with_plurality) for o in outcomes) /
            max(1, sum(o.agrees_with_plurality is not None for o in outcomes)),
            "tokens": sum(o.tokens for o in outcomes)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3,4")
    parser.add_argument("--iterations", type=int, default=40, help="inference iterations (paper: 40)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    questions = list(load_solutions().questions)
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    report: dict[str, Any] = {}
    for name, config in variants(args.iterations).items():
        rows = [run_variant(questions, config, seed) for seed in seeds]
        report[name] = {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in rows[0]}
        report[name]["acc_per_seed"] = [round(r["acc"], 4) for r in rows]
        if not args.json:
            print(f"{name:38s} {json.dumps(report[name])}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"seeds": seeds, "iterations": args.iterations, "questions": len(questions),
                          "variants": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
