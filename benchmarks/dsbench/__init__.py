"""DSBench data modeling: task metadata, the metric of each task, submission scoring and RPG."""

from benchmarks.dsbench.scoring import SubmissionScore, normalized_performance, rpg, score_submission
from benchmarks.dsbench.tasks import DsbenchSpec, load_specs

__all__ = [
    "DsbenchSpec",
    "load_specs",
    "SubmissionScore",
    "score_submission",
    "normalized_performance",
    "rpg",
]
