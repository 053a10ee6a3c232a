"""Coarse filters: cheap, rule-based checks that decide which crawled notebooks reach the LLM stages.

Each rule is a small function of the notebook's facts that returns a ``Reason`` or None; every failed rule
is reported (not only the first), so the counts per reason in the stats report are honest. A notebook is
kept when no rule fails. Notebooks that fail only because their data is not available (missing files,
data read from URLs) are still useful for supervised fine-tuning — they carry ``sft_only=True``.
"""

from __future__ import annotations

import enum
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from jupiter.config_model import ConfigModel, Count
from jupiter.sft.data import file_sha256
from nbqa_pipeline.blacklist import BLACKLIST, code_mentions, find_in_names, find_in_text
from nbqa_pipeline.deps import Dependencies, ReadKind, extract_dependencies, resolve_path
from nbqa_pipeline.notebook import LoadedNotebook, NotebookError, load_notebook
from nbqa_pipeline.rows import count_rows, is_lfs_pointer

__all__ = [
    "Reason",
    "Verdict",
    "FilterConfig",
    "DataFileInfo",
    "NotebookFacts",
    "FilterResult",
    "RULES",
    "gather_facts",
    "filter_notebook",
    "count_code_lines",
    "DATA_AVAILABILITY_REASONS",
]

log = logging.getLogger(__name__)


class Reason(str, enum.Enum):
    """Why a notebook is dropped; the values are what the JSONL files and reports show."""

    INVALID_NOTEBOOK = "invalid_notebook"
    OUT_OF_ORDER = "out_of_order"
    UNEXECUTED_CELLS = "unexecuted_cells"
    ERROR_OUTPUT = "error_output"
    BLACKLISTED_DATASET = "blacklisted_dataset"
    TOO_FEW_CODE_LINES = "too_few_code_lines"
    NEURAL_NETWORK = "neural_network"
    NO_DATA_FILES = "no_data_files"
    MISSING_DATA = "missing_data"
    URL_DATA = "url_data"
    TOO_FEW_ROWS = "too_few_rows"
    # corpus-level caps (nbqa_pipeline.diversity)
    REPO_CAP = "repo_cap"
    DATA_GROUP_CAP = "data_group_cap"
    DATA_SHARED_ACROSS_REPOS = "data_shared_across_repos"


DATA_AVAILABILITY_REASONS = frozenset({Reason.MISSING_DATA, Reason.URL_DATA})


class Verdict(str, enum.Enum):
    KEEP = "keep"
    DROP = "drop"


class FilterConfig(ConfigModel):
    """Thresholds of the coarse filters (defaults follow the NbQA paper)."""

    min_code_lines: Count = 40  # non-blank, non-comment lines over all code cells
    min_rows: Count = 20  # every data file read by pandas/numpy needs at least this many data rows
    blacklist: tuple[str, ...] = BLACKLIST




@dataclass(frozen=True)
class DataFileInfo:
    """One data file the notebook reads, and what we found on disk for it."""

    path: str  # as written in the notebook
    repo_path: str | None  # resolved inside the repository; None for URLs and paths outside it
    kind: ReadKind
    is_url: bool
    exists: bool
    lfs_pointer: bool = False
    rows: int | None = None
    bytes: int | None = None
    sha256: str | None = None
    source_urls: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind.value, "source_urls": list(self.source_urls)}


@dataclass(frozen=True)
class NotebookFacts:
    """Everything the rules look at, computed once per notebook."""

    notebook: LoadedNotebook | None
    error: str | None
    invalid_cause: str | None = None  # an InvalidCause value when the notebook is unusable
    deps: Dependencies = field(default_factory=lambda: Dependencies(()))
    files: tuple[DataFileInfo, ...] = ()
    code_lines: int = 0

    @property
    def code(self) -> str:
        if self.notebook is None:
            return ""
        return "\n".join(c.source for c in self.notebook.code_cells)


Rule = Callable[[NotebookFacts, FilterConfig], "Reason | None"]


def count_code_lines(notebook: LoadedNotebook) -> int:
    """Non-blank lines of code cells that are not comments, magics or shell escapes."""
    total = 0
    for cell in notebook.code_cells:
        for line in cell.source.splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith(("#", "%", "!")):
                total += 1
    return total


def gather_facts(notebook_file: Path, repo_path: str) -> NotebookFacts:
    """Load the notebook at ``notebook_file`` (whose path in its repository is ``repo_path``) and inspect
    every data file it reads, looking for them beside it on disk (the crawl/corpus layout mirrors the
    repository)."""
    try:
        notebook = load_notebook(notebook_file)
    except NotebookError as exc:
        return NotebookFacts(notebook=None, error=str(exc), invalid_cause=exc.cause.value)
    deps = extract_dependencies(notebook)
    files = []
    for ref in deps.refs:
        if ref.is_url:
            files.append(DataFileInfo(ref.path, None, ref.kind, True, False, source_urls=ref.source_urls))
            continue
        resolved = resolve_path(ref.path, repo_path)
        local = Path(os.path.normpath(notebook_file.parent / ref.path.replace("\\", "/"))) if resolved else None
        exists = bool(local and local.is_file())
        lfs = bool(exists and local and is_lfs_pointer(local))
        rows = size = digest = None
        if exists and not lfs and local is not None:
            size = local.stat().st_size
            digest = file_sha256(local)
            rows = count_rows(local, ref)
        files.append(
            DataFileInfo(ref.path, resolved, ref.kind, False, exists, lfs, rows, size, digest, ref.source_urls)
        )
    return NotebookFacts(notebook=notebook, error=None, deps=deps, files=tuple(files),
                         code_lines=count_code_lines(notebook))


# ----------------------------------------------------------------------------------------------- rules


def _nonempty_code(facts: NotebookFacts):
    assert facts.notebook is not None
    return [c for c in facts.notebook.code_cells if c.source.strip()]


def rule_in_order(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    """Executed cells must carry strictly increasing execution counts in document order."""
    counts = [c.execution_count for c in _nonempty_code(facts) if c.execution_count is not None]
    return Reason.OUT_OF_ORDER if any(b <= a for a, b in zip(counts, counts[1:])) else None


def rule_all_executed(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    """Every non-empty code cell has run (an empty trailing cell does not count)."""
    return Reason.UNEXECUTED_CELLS if any(c.execution_count is None for c in _nonempty_code(facts)) else None


def rule_no_errors(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    """No ``error`` output; warnings on stderr are fine."""
    for cell in _nonempty_code(facts):
        if any(o.get("output_type") == "error" for o in cell.outputs):
            return Reason.ERROR_OUTPUT
    return None


def rule_blacklist(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    """A famous dataset named in a data file's name or anywhere in the code (``load_iris``)."""
    names = [f.path for f in facts.files]
    if facts.notebook is None:
        return None
    mentions = code_mentions(c.source for c in facts.notebook.code_cells)
    if find_in_names(names, config.blacklist) or find_in_text(mentions, config.blacklist):
        return Reason.BLACKLISTED_DATASET
    return None


def rule_code_lines(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    return Reason.TOO_FEW_CODE_LINES if facts.code_lines < config.min_code_lines else None


_NN = re.compile(
    r"^\s*(?:import|from)\s+(?:torch|torchvision|tensorflow|tf_keras|keras|jax|flax|transformers|"
    r"pytorch_lightning|lightning|fastai|mxnet|paddle|theano|caffe|sentence_transformers|timm|tensorflow_hub|"
    r"cupy|cudf)\b"
    r"|\bsklearn\.neural_network\b|\bMLP(?:Classifier|Regressor)\b|\.from_pretrained\("
    r"|\.cuda\(|[\"']cuda(?::\d+)?[\"']|list_physical_devices\(\s*[\"']GPU",
    re.M,
)


def rule_no_neural_network(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    """Neural networks, pre-trained models and GPU use are out of scope for classical data analysis."""
    return Reason.NEURAL_NETWORK if _NN.search(facts.code) else None


def rule_has_data(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    return Reason.NO_DATA_FILES if not facts.deps.refs and not facts.deps.unresolved else None


def rule_data_present(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    """Every local file read is in the repository (an LFS pointer is not the data); every read path is known."""
    if facts.deps.unresolved:
        return Reason.MISSING_DATA
    if any(not f.is_url and (not f.exists or f.lfs_pointer) for f in facts.files):
        return Reason.MISSING_DATA
    return None


def rule_no_url_data(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    return Reason.URL_DATA if any(f.is_url for f in facts.files) else None


def rule_enough_rows(facts: NotebookFacts, config: FilterConfig) -> Reason | None:
    if any(f.rows is not None and f.rows < config.min_rows for f in facts.files):
        return Reason.TOO_FEW_ROWS
    return None


RULES: tuple[Rule, ...] = (
    rule_in_order,
    rule_all_executed,
    rule_no_errors,
    rule_blacklist,
    rule_code_lines,
    rule_no_neural_network,
    rule_has_data,
    rule_data_present,
    rule_no_url_data,
    rule_enough_rows,
)


@dataclass(frozen=True)
class FilterResult:
    """The verdict on one notebook, with the facts behind it (written as one JSONL record)."""

    id: str
    verdict: Verdict
    reasons: tuple[Reason, ...]
    sft_only: bool
    facts: NotebookFacts
    source: Mapping[str, Any]

    @property
    def data_complete(self) -> bool:
        return not any(r in DATA_AVAILABILITY_REASONS for r in self.reasons)

    def to_dict(self) -> dict[str, Any]:
        record = dict(self.source)
        record.update(
            {
                "id": self.id,
                "verdict": self.verdict.value,
                "reasons": [r.value for r in self.reasons],
                "sft_only": self.sft_only,
                "data_complete": self.data_complete,
                "code_lines": self.facts.code_lines,
                "data_files": [f.to_dict() for f in self.facts.files],
                "unresolved_reads": list(self.facts.deps.unresolved),
                "url_data": [f.path for f in self.facts.files if f.is_url],
                "error": self.facts.error,
                "invalid_cause": self.facts.invalid_cause,
            }
        )
        return record


def filter_notebook(
    notebook_file: Path, repo_path: str, *, id: str, source: Mapping[str, Any] | None = None,
    config: FilterConfig = FilterConfig(), rules: tuple[Rule, ...] = RULES,
) -> FilterResult:
    """Run every rule on one notebook; ``source`` (the input record) is carried into the result."""
    facts = gather_facts(Path(notebook_file), repo_path)
    if facts.notebook is None:
        reasons: tuple[Reason, ...] = (Reason.INVALID_NOTEBOOK,)
    else:
        reasons = tuple(r for r in (rule(facts, config) for rule in rules) if r is not None)
    sft_only = bool(reasons) and all(r in DATA_AVAILABILITY_REASONS for r in reasons)
    verdict = Verdict.KEEP if not reasons else Verdict.DROP
    return FilterResult(id, verdict, reasons, sft_only, facts, dict(source or {}))
