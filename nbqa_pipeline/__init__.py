"""NbQA pipeline: GitHub notebook crawl → coarse filters → LLM extraction → verification → NbQA / SFT export.

Every stage reads and writes JSONL files and folders and is resumable (a rerun skips finished ids); the
``jupiter nbqa <stage>`` commands wrap the functions exported here.
"""

from nbqa_pipeline.crawl import CrawlConfig, CrawlReport, crawl
from nbqa_pipeline.deps import DataRef, Dependencies, ReadKind, extract_dependencies, resolve_path
from nbqa_pipeline.diversity import DiversityConfig, apply_diversity
from nbqa_pipeline.export import ExportConfig, ExportReport, OverLength, run_export
from nbqa_pipeline.extract import ExtractConfig, ExtractReport, extract_notebook, run_extract
from nbqa_pipeline.filter_stage import FilterStageReport, run_filter
from nbqa_pipeline.filters import FilterConfig, FilterResult, Reason, Verdict, filter_notebook
from nbqa_pipeline.github import GitHubClient, GitHubError
from nbqa_pipeline.llm_client import ChatClient, ChatReply, LLMConfig, LLMError
from nbqa_pipeline.notebook import LoadedNotebook, NotebookError, load_notebook
from nbqa_pipeline.stats import StatsReport, collect_stats, write_report
from nbqa_pipeline.verify import VerifyConfig, VerifyReport, run_verify, verify_task

__all__ = [
    "CrawlConfig",
    "CrawlReport",
    "crawl",
    "GitHubClient",
    "GitHubError",
    "ChatClient",
    "ChatReply",
    "LLMConfig",
    "LLMError",
    "ExtractConfig",
    "ExtractReport",
    "extract_notebook",
    "run_extract",
    "VerifyConfig",
    "VerifyReport",
    "run_verify",
    "verify_task",
    "ExportConfig",
    "ExportReport",
    "OverLength",
    "run_export",
    "StatsReport",
    "collect_stats",
    "write_report",
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
