"""NbQA pipeline: GitHub notebook crawl → coarse filters → LLM extraction → verification → NbQA / SFT export.

Every stage reads and writes JSONL files and folders and is resumable (a rerun skips finished ids); the
``jupiter nbqa <stage>`` commands (``python -m nbqa_pipeline <stage>``) wrap the functions exported here.
"""

from nbqa_pipeline.deps import DataRef, Dependencies, ReadKind, extract_dependencies, resolve_path
from nbqa_pipeline.diversity import DiversityConfig, apply_diversity
from nbqa_pipeline.filter_stage import FilterStageReport, run_filter
from nbqa_pipeline.filters import FilterConfig, FilterResult, Reason, Verdict, filter_notebook
from nbqa_pipeline.notebook import LoadedNotebook, NotebookError, load_notebook

__all__ = [
    "DataRef",
    "Dependencies",
    "ReadKind",
    "extract_dependencies",
    "resolve_path",
    "DiversityConfig",
    "apply_diversity",
    "FilterStageReport",
    "run_filter",
    "FilterConfig",
    "FilterResult",
    "Reason",
    "Verdict",
    "filter_notebook",
    "LoadedNotebook",
    "NotebookError",
    "load_notebook",
]
