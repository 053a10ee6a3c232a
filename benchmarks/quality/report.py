"""The benchmark's report: the flat per-seed figures, and their mean and spread over seeds."""

from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["HEADLINE_KEYS", "seed_figures", "aggregate", "targets"]

#: the numbers every report has at its top level (None where a mode did not run)
HEADLINE_KEYS = ("react_acc", "vote_acc", "mcts_acc", "mcts_vm_acc", "mcts_vm_value_acc", "mcts_acc_heldout",
                 "vote_eq_acc", "vote_eq_tokens", "vote_eq_runs", "in_tree_rate", "plurality_agreement",
                 "mcts_vm_in_tree_rate", "mcts_vm_plurality_agreement")


def seed_figures(modes: dict[str, dict[str, Any]], heldout: dict[str, Any] | None, vote_eq_runs: int | None
                 ) -> dict[str, Any]:
    """One seed's headline figures from its mode summaries (``ModeRun.summary()`` per mode name)."""

    def get(mode: str, key: str) -> Any:
        return modes.get(mode, {}).get(key)

    return {
        "react_acc": get("react", "acc"),
        "vote_acc": get("vote", "acc"),
        "mcts_acc": get("mcts", "acc"),
        "mcts_vm_acc": get("mcts_vm", "acc"),
        "mcts_vm_value_acc": get("mcts_vm", "value_acc"),  # same trees, --decision value
        "mcts_acc_heldout": heldout.get("acc") if heldout else None,
        "vote_eq_acc": get("vote_eq", "acc"),
        "vote_eq_tokens": get("vote_eq", "tokens"),
        "vote_eq_runs": vote_eq_runs,
        "in_tree_rate": get("mcts", "in_tree_rate"),
        "plurality_agreement": get("mcts", "plurality_agreement"),
        "mcts_vm_in_tree_rate": get("mcts_vm", "in_tree_rate"),
        "mcts_vm_plurality_agreement": get("mcts_vm", "plurality_agreement"),
        "tokens": {name: summary.get("tokens") for name, summary in modes.items()},
    }


def _stats(values: Sequence[float]) -> dict[str, float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {"mean": round(mean, 4), "std": round(std, 4), "min": min(values), "max": max(values)}


def aggregate(per_seed: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean of every headline figure over seeds at the top level, and ``spread`` (mean, std, min, max) beside.

    With one seed the top level holds that seed's figures as they are.
    """
    if not per_seed:
        raise ValueError("aggregate: no seeds")
    if len(per_seed) == 1:
        return dict(per_seed[0])
    out: dict[str, Any] = {}
    spread: dict[str, Any] = {}
    for key in HEADLINE_KEYS:
        values = [s[key] for s in per_seed if s.get(key) is not None]
        if values:
            spread[key] = _stats(values)
            out[key] = spread[key]["mean"]
        else:
            out[key] = None
    tokens: dict[str, Any] = {}
    for mode in sorted({m for s in per_seed for m in s.get("tokens", {})}):
        values = [s["tokens"][mode] for s in per_seed if s.get("tokens", {}).get(mode) is not None]
        if values:
            spread[f"tokens.{mode}"] = _stats(values)
            tokens[mode] = spread[f"tokens.{mode}"]["mean"]
    out["tokens"] = tokens
    out["spread"] = spread
    return out


def targets(figures: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets on (mean) figures: each as {met, lhs, rhs, margin}; None where a figure is missing."""

    def check(lhs: float | None, rhs: float | None, strict: bool) -> dict[str, Any] | None:
        if lhs is None or rhs is None:
            return None
        met = lhs > rhs if strict else lhs >= rhs
        return {"met": met, "lhs": lhs, "rhs": rhs, "margin": round(lhs - rhs, 4)}

    baseline = [v for v in (figures.get("react_acc"), figures.get("vote_acc")) if v is not None]
    agreement = figures.get("plurality_agreement")
    return {
        "mcts_ge_baselines": check(figures.get("mcts_acc"), max(baseline) if baseline else None, strict=False),
        "mcts_vm_gt_mcts_heldout": check(figures.get("mcts_vm_acc"), figures.get("mcts_acc_heldout"), strict=True),
        "plurality_agreement_100": None if agreement is None else
        {"met": agreement >= 1.0, "lhs": agreement, "rhs": 1.0, "margin": round(agreement - 1.0, 4)},
    }
