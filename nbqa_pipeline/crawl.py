"""The ``crawl`` stage: find notebooks with GitHub code search, download them and the data they read.

Why sharded search: GitHub returns at most 1,000 results per query. We add a ``size:LO..HI`` qualifier and
split the byte range in two whenever a shard reports more results than that, until each shard fits (a shard
of a single size that still overflows is kept and logged — the only place results can be lost).

Several queries (``read_csv``, ``read_excel``, ...) can feed one output folder; their hits are merged.
Everything is resumable: ``search/<query hash>.json`` holds one query's pending shards and the next page of
its current shard (written after every page), ``candidates.jsonl`` the notebooks found, ``repos.jsonl`` repository
metadata and ``notebooks.jsonl`` the downloaded notebooks. Files are stored under ``files/<owner>__<repo>/<path>``,
mirroring the repository so that a notebook's relative data paths resolve on disk. Its records carry
``repo, path, local_path`` — the input the ``filter`` stage reads.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from pydantic import Field, field_validator, model_validator

from jupiter.appendlog import replace_atomically
from jupiter.config_model import ConfigModel, Count, PositiveInt
from nbqa_pipeline.deps import extract_dependencies, resolve_path
from nbqa_pipeline.github import GitHubClient, GitHubError
from nbqa_pipeline.jsonl import append_jsonl, finished_ids, read_jsonl
from nbqa_pipeline.notebook import NotebookError, parse_notebook

__all__ = ["CrawlConfig", "CrawlReport", "crawl", "search_notebooks", "download_notebooks", "repo_slug", "state_path"]

log = logging.getLogger(__name__)


class CrawlConfig(ConfigModel):
    """What to search for and how much to fetch."""

    queries: tuple[str, ...] = Field(("read_csv extension:ipynb",), min_length=1)
    min_size: Count = 1000  # bytes; the size qualifier GitHub search understands
    max_size: Count = 2_000_000
    per_page: int = Field(100, strict=True, ge=1, le=100)  # GitHub's maximum for code search
    result_cap: PositiveInt = 1000  # GitHub's per-query cap; tests lower it
    max_notebooks: int | None = None
    max_data_bytes: int = 20 * 2**20

    @field_validator("queries")
    @classmethod
    def _no_size_qualifier(cls, queries: tuple[str, ...]) -> tuple[str, ...]:
        for query in queries:
            if "size:" in query:
                raise ValueError(f"{query!r} has a size: qualifier (the crawler shards on size)")
        return queries

    @model_validator(mode="after")
    def _sizes_in_order(self) -> CrawlConfig:
        if self.min_size > self.max_size:
            raise ValueError(f"min_size/max_size: need {self.min_size} <= {self.max_size}")
        return self



@dataclass(frozen=True)
class CrawlReport:
    candidates: int
    shards_searched: int
    shards_overflowing: int
    notebooks: dict[str, int]
    data_files: dict[str, int]
    client: dict[str, Any] = field(default_factory=dict)


def repo_slug(full_name: str) -> str:
    """Folder name of a repository under ``files/``."""
    return full_name.replace("/", "__")


def state_path(out_dir: Path, query: str) -> Path:
    """Where the search state of ``query`` lives."""
    return out_dir / "search" / (hashlib.sha1(query.encode()).hexdigest()[:16] + ".json")


def _load_state(path: Path, query: str, config: CrawlConfig) -> dict[str, Any]:
    if path.exists():
        return json.loads(path.read_text())
    return {"query": query, "pending": [[config.min_size, config.max_size]], "current": None,
            "searched": 0, "overflowing": 0, "done": False}


def _save_state(path: Path, state: dict[str, Any]) -> None:
    replace_atomically(path, lambda tmp: tmp.write_text(json.dumps(state)))


def _item_record(item: dict[str, Any]) -> dict[str, Any]:
    repo = item["repository"]["full_name"]
    ref = parse_qs(urlparse(item.get("url", "")).query).get("ref", [None])[0]
    return {"id": f"{repo}/{item['path']}", "repo": repo, "path": item["path"], "ref": ref,
            "sha": item.get("sha"), "html_url": item.get("html_url")}


def search_notebooks(client: GitHubClient, out_dir: Path, query: str, config: CrawlConfig) -> dict[str, Any]:
    """Run (or resume) the sharded code search of ``query``; append new hits to ``candidates.jsonl``.

    Returns the query's final state."""
    state_file, cand_file = state_path(out_dir, query), out_dir / "candidates.jsonl"
    state = _load_state(state_file, query, config)
    seen = finished_ids(cand_file)
    while not state["done"]:
        if state["current"] is None:
            if not state["pending"]:
                state["done"] = True
                _save_state(state_file, state)
                break
            lo, hi = state["pending"].pop(0)
            state["current"] = {"lo": lo, "hi": hi, "next": None, "checked": False}
        shard = state["current"]
        if shard["next"]:
            response = client.get(shard["next"])
        else:
            params = {"q": f"{query} size:{shard['lo']}..{shard['hi']}", "per_page": config.per_page, "page": 1}
            response = client.get("search/code", params)
        if response is None:
            raise GitHubError("code search returned 404: is the API base URL right?", 404)
        page = response.json()
        total = int(page.get("total_count", 0))
        if not shard["checked"]:
            state["searched"] += 1
            if total > config.result_cap and shard["hi"] > shard["lo"]:
                mid = (shard["lo"] + shard["hi"]) // 2
                state["pending"][:0] = [[shard["lo"], mid], [mid + 1, shard["hi"]]]
                log.info("size %d..%d has %d results: splitting", shard["lo"], shard["hi"], total)
                state["current"] = None
                _save_state(state_file, state)
                continue
            if total > config.result_cap:
                state["overflowing"] += 1
                log.warning("size %d..%d alone has %d results (> %d): some are unreachable",
                            shard["lo"], shard["hi"], total, config.result_cap)
            shard["checked"] = True
        for item in page.get("items", ()):
            record = _item_record(item)
            if record["id"] not in seen:
                append_jsonl(cand_file, record)
                seen.add(record["id"])
        shard["next"] = response.links.get("next")
        if not shard["next"]:
            state["current"] = None
        _save_state(state_file, state)
    return state


def _repo_meta(client: GitHubClient, out_dir: Path, repo: str, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    if repo in cache:
        return cache[repo]
    data = client.repository(repo)
    if data is None:
        meta = {"id": repo, "missing": True}
    else:
        licence = data.get("license") or {}
        meta = {"id": repo, "missing": False, "default_branch": data.get("default_branch"),
                "license": licence.get("spdx_id"), "stars": data.get("stargazers_count"),
                "fork": bool(data.get("fork")), "archived": bool(data.get("archived"))}
    append_jsonl(out_dir / "repos.jsonl", meta)
    cache[repo] = meta
    return meta


def _write_file(path: Path, data: bytes) -> None:
    replace_atomically(path, lambda tmp: tmp.write_bytes(data))


def _download_one(client: GitHubClient, out_dir: Path, cand: dict[str, Any], meta: dict[str, Any],
                  config: CrawlConfig) -> dict[str, Any]:
    repo, path = cand["repo"], cand["path"]
    ref = cand.get("ref") or meta.get("default_branch")
    local_path = f"files/{repo_slug(repo)}/{path}"
    record: dict[str, Any] = {"id": cand["id"], "repo": repo, "path": path, "ref": ref, "local_path": local_path,
                              "license": meta.get("license"), "html_url": cand.get("html_url")}
    if meta.get("missing"):
        return {**record, "status": "repo_missing", "data_files": [], "url_data": []}
    body = client.file_bytes(repo, path, ref)
    if body is None:
        return {**record, "status": "notebook_missing", "data_files": [], "url_data": []}
    _write_file(out_dir / local_path, body)
    try:
        notebook = parse_notebook(body.decode("utf-8", errors="replace"), out_dir / local_path)
    except NotebookError as exc:
        return {**record, "status": "invalid_notebook", "error": str(exc), "data_files": [], "url_data": []}
    deps = extract_dependencies(notebook)
    files = []
    for ref_ in deps.local:
        repo_path = resolve_path(ref_.path, path)
        entry = {"path": ref_.path, "repo_path": repo_path, "source_urls": list(ref_.source_urls)}
        if repo_path is None:
            files.append({**entry, "status": "outside_repo"})
            continue
        target = out_dir / "files" / repo_slug(repo) / repo_path
        if target.exists():
            files.append({**entry, "status": "present", "bytes": target.stat().st_size})
            continue
        data = client.file_bytes(repo, repo_path, ref)
        if data is None:
            files.append({**entry, "status": "missing"})
        elif len(data) > config.max_data_bytes:
            files.append({**entry, "status": "too_large", "bytes": len(data)})
        else:
            _write_file(target, data)
            files.append({**entry, "status": "present", "bytes": len(data)})
    complete = all(f["status"] == "present" for f in files) and not deps.urls and not deps.unresolved
    return {**record, "status": "ok", "data_files": files, "url_data": [r.path for r in deps.urls],
            "unresolved_reads": list(deps.unresolved), "data_complete": complete,
            # kept even when data is missing: such notebooks are still SFT material
            "sft_only": not complete}


def download_notebooks(client: GitHubClient, out_dir: Path, config: CrawlConfig,
                       progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it) -> Counter[str]:
    """Download every candidate not yet in ``notebooks.jsonl`` with the data files it reads."""
    out_file = out_dir / "notebooks.jsonl"
    done = finished_ids(out_file)
    repos = {r["id"]: r for r in read_jsonl(out_dir / "repos.jsonl")}
    candidates = [c for c in read_jsonl(out_dir / "candidates.jsonl") if c["id"] not in done]
    budget = None if config.max_notebooks is None else max(0, config.max_notebooks - len(done))
    if budget is not None:
        candidates = candidates[:budget]
    outcomes: Counter[str] = Counter()
    for cand in progress(candidates):
        try:
            meta = _repo_meta(client, out_dir, cand["repo"], repos)
            record = _download_one(client, out_dir, cand, meta, config)
        except GitHubError as exc:
            # not written: a rerun tries this notebook again
            log.warning("%s: %s; left for a rerun", cand["id"], exc)
            outcomes["error"] += 1
            continue
        append_jsonl(out_file, record)
        outcomes[record["status"]] += 1
    return outcomes


def crawl(client: GitHubClient, out_dir: Path, config: CrawlConfig = CrawlConfig(),
          progress: Callable[[Iterable[Any]], Iterable[Any]] = lambda it: it) -> CrawlReport:
    """Search (resuming), then download (skipping finished notebooks). Counts cover the whole output."""
    out_dir.mkdir(parents=True, exist_ok=True)
    states = [search_notebooks(client, out_dir, query, config) for query in config.queries]
    download_notebooks(client, out_dir, config, progress)
    records = list(read_jsonl(out_dir / "notebooks.jsonl"))
    data = Counter(f["status"] for r in records for f in r.get("data_files", ()))
    data.update({"url": sum(len(r.get("url_data", ())) for r in records)})
    return CrawlReport(
        candidates=len(finished_ids(out_dir / "candidates.jsonl")),
        shards_searched=sum(s["searched"] for s in states),
        shards_overflowing=sum(s["overflowing"] for s in states),
        notebooks=dict(Counter(r["status"] for r in records)),
        data_files=dict(data),
        client=asdict(client.stats),
    )
