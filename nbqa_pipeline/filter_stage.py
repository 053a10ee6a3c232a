"""The ``filter`` stage: per-notebook rules over a notebook list, then the corpus-level caps.

Input: JSONL records with ``repo``, ``path`` (in the repository) and ``local_path`` (relative to ``root``),
as written by ``crawl`` — the shared corpus's MANIFEST.jsonl has the same fields. Output folder:
- ``filter.jsonl``: one record per notebook (verdict, every failed reason, data-file facts); appended, so
  a rerun skips finished ids;
- ``selected.jsonl``: rewritten at the end of each run — the notebooks that go on to ``extract``
  (kept, or SFT-only), each with ``cap_reason`` null; ``capped.jsonl`` lists those removed by a cap.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbqa_pipeline.diversity import DiversityConfig, apply_diversity
from nbqa_pipeline.filters import FilterConfig, filter_notebook
from nbqa_pipeline.jsonl import append_jsonl, finished_ids, read_jsonl, write_jsonl

__all__ = ["FilterStageReport", "record_id", "run_filter"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FilterStageReport:
    processed: int
    skipped: int
    verdicts: dict[str, int]
    reasons: dict[str, int]
    caps: dict[str, int]
    selected: int
    out_dir: Path = field(default=Path("."))


def record_id(record: dict[str, Any]) -> str:
    """A notebook's id: its own ``id`` field, else ``repo/path``."""
    if record.get("id"):
        return str(record["id"])
    try:
        return f"{record['repo']}/{record['path']}"
    except KeyError as exc:
        raise ValueError(f"notebook record lacks field {exc.args[0]!r}: {record}") from None


def run_filter(
    inputs: Iterable[dict[str, Any]],
    root: Path,
    out_dir: Path,
    config: FilterConfig = FilterConfig(),
    diversity: DiversityConfig | None = DiversityConfig(),
    progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it,
) -> FilterStageReport:
    """Filter every input notebook not already in ``out_dir/filter.jsonl``, then apply the caps."""
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "filter.jsonl"
    done = finished_ids(out_file)
    processed = skipped = 0
    for record in progress(list(inputs)):
        nid = record_id(record)
        if nid in done:
            skipped += 1
            continue
        if record.get("status") in {"repo_missing", "notebook_missing"}:
            continue  # crawl could not fetch it: nothing on disk to judge
        for key in ("path", "local_path"):
            if key not in record:
                raise ValueError(f"notebook record {nid}: missing field {key!r}")
        result = filter_notebook(root / record["local_path"], record["path"], id=nid, source=record, config=config)
        append_jsonl(out_file, result.to_dict())
        done.add(nid)
        processed += 1
    records = list(read_jsonl(out_file))
    outcome = apply_diversity(records, diversity) if diversity is not None else {
        str(r["id"]): None for r in records if r.get("verdict") == "keep" or r.get("sft_only")
    }
    selected, capped = [], []
    for rec in records:
        rid = str(rec["id"])
        if rid not in outcome:
            continue
        reason = outcome[rid]
        rec = dict(rec, cap_reason=reason.value if reason else None)
        (capped if reason else selected).append(rec)
    write_jsonl(out_dir / "selected.jsonl", selected)
    write_jsonl(out_dir / "capped.jsonl", capped)
    reasons: Counter[str] = Counter(r for rec in records for r in rec.get("reasons", ()))
    return FilterStageReport(
        processed=processed,
        skipped=skipped,
        verdicts=dict(Counter(str(rec.get("verdict")) for rec in records)),
        reasons=dict(reasons),
        caps=dict(Counter(str(rec["cap_reason"]) for rec in capped)),
        selected=len(selected),
        out_dir=out_dir,
    )
