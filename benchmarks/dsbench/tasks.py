"""The 74 DSBench data-modeling tasks' metadata and the registered metric each one is scored with.

``tasks.json`` (shipped beside the benchmark data) gives per task the scoring line of the official
per-competition script, the answer column, and the official ``gt`` / ``baseline`` values used for RPG.
The metric is recognised from that line (``benchmarks.metrics.metric_from_line``); the few lines that do not
name their metric, or name the wrong one, are resolved by ``OVERRIDES`` with the reason written down.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.metrics import Metric, MetricError, get_metric, metric_from_line
from benchmarks.paths import default_data_dir

__all__ = ["DsbenchSpec", "load_specs", "OVERRIDES"]

#: task name → (registry metric name, why the scoring line is not enough)
OVERRIDES: dict[str, tuple[str, str]] = {
    "us-patent-phrase-to-phrase-matching": (
        "pearson",
        "the metadata has no scoring line; the competition is scored by the Pearson correlation (gt≈1, b=0)",
    ),
    "playground-series-s3e23": (
        "roc_auc",
        "the line says 'rmse' but the task is a binary defect prediction with higher-is-better, gt 1 and "
        "baseline 0.5: the competition's ROC-AUC",
    ),
}


@dataclass(frozen=True)
class DsbenchSpec:
    """One data-modeling task's scoring facts (a ``tasks.json`` record with its metric resolved)."""

    name: str
    metric: str  # registry name in benchmarks.metrics.METRICS
    value_col: str
    gt: float
    baseline: float
    higher_is_better: bool
    metric_line: str | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any], where: str = "tasks.json") -> DsbenchSpec:
        try:
            name = str(record["name"])
            override = OVERRIDES.get(name)
            metric = override[0] if override else metric_from_line(record.get("metric_line"))
            if metric is None:
                raise MetricError(f"{where}: task {name!r}: no known metric in line {record.get('metric_line')!r}")
            return cls(
                name=name,
                metric=metric,
                value_col=str(record.get("value_col") or ""),
                gt=float(record["gt"]),
                baseline=float(record["baseline"]),
                higher_is_better=bool(record["higher_is_better"]),
                metric_line=record.get("metric_line"),
            )
        except KeyError as exc:
            raise MetricError(f"{where}: a task record lacks {exc.args[0]!r}") from None

    @property
    def scorer(self) -> Metric:
        return get_metric(self.metric)


def load_specs(path: str | Path | None = None) -> list[DsbenchSpec]:
    """Read ``tasks.json`` (default: the shared benchmark copy) into specs, in file order."""
    path = Path(path) if path is not None else default_data_dir("dsbench") / "tasks.json"
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise MetricError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise MetricError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(records, list):
        raise MetricError(f"{path}: expected a JSON list of task records")
    return [DsbenchSpec.from_record(r, where=str(path)) for r in records]
