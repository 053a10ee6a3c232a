"""Corpus-level caps that keep one repository or one copied dataset from dominating NbQA.

Why separate from the per-notebook rules: these caps depend on which other notebooks survived, so they run
once over the whole filtered set (deterministically: notebooks with more code first, then by id). Rules:
- notebooks are grouped by the hash of their data files; a group that spans repositories keeps only the
  notebooks of its first repository (``data_shared_across_repos``), and at most ``max_per_data_group``
  of those (``data_group_cap``);
- then at most ``max_per_repo_complete`` notebooks with complete data and ``max_per_repo_incomplete``
  with incomplete data (SFT-only) per repository (``repo_cap``).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from jupiter.config_model import ConfigModel, Count
from nbqa_pipeline.filters import Reason

__all__ = ["DiversityConfig", "apply_diversity", "data_group_key"]


class DiversityConfig(ConfigModel):
    max_per_repo_complete: Count = 2
    max_per_repo_incomplete: Count = 1
    max_per_data_group: Count = 2




def data_group_key(record: Mapping[str, Any]) -> str | None:
    """Hash of the sorted content hashes of the notebook's present data files (None without any)."""
    hashes = sorted({f["sha256"] for f in record.get("data_files", ()) if f.get("sha256")})
    if not hashes:
        return None
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:16]


def apply_diversity(
    records: Sequence[Mapping[str, Any]], config: DiversityConfig = DiversityConfig()
) -> dict[str, Reason | None]:
    """For each candidate record (a filter record with verdict keep, or sft_only), None if it stays, else
    the cap that removed it. Records that are neither are ignored."""
    candidates = [r for r in records if r.get("verdict") == "keep" or r.get("sft_only")]
    candidates.sort(key=lambda r: (-int(r.get("code_lines", 0)), str(r["id"])))
    outcome: dict[str, Reason | None] = {str(r["id"]): None for r in candidates}

    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in candidates:
        key = data_group_key(record) if record.get("verdict") == "keep" else None
        if key is not None:
            groups[key].append(record)
    for members in groups.values():
        home = members[0]["repo"]
        kept = 0
        for record in members:
            if record["repo"] != home:
                outcome[str(record["id"])] = Reason.DATA_SHARED_ACROSS_REPOS
            elif kept >= config.max_per_data_group:
                outcome[str(record["id"])] = Reason.DATA_GROUP_CAP
            else:
                kept += 1

    per_repo: dict[tuple[str, bool], int] = defaultdict(int)
    for record in candidates:
        rid = str(record["id"])
        if outcome[rid] is not None:
            continue
        complete = record.get("verdict") == "keep"
        cap = config.max_per_repo_complete if complete else config.max_per_repo_incomplete
        slot = (str(record["repo"]), complete)
        if per_repo[slot] >= cap:
            outcome[rid] = Reason.REPO_CAP
        else:
            per_repo[slot] += 1
    return outcome
