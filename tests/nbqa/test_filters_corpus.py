"""Filters and dependency extraction on the 25 real notebooks: every verdict and reason must match MANIFEST."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nbqa_pipeline.deps import extract_dependencies
from nbqa_pipeline.filter_stage import run_filter
from nbqa_pipeline.filters import filter_notebook
from nbqa_pipeline.jsonl import read_jsonl
from nbqa_pipeline.notebook import load_notebook


def _entries(manifest):
    return [pytest.param(m, id=m["local_path"]) for m in manifest]


def test_corpus_is_as_described(manifest):
    assert len(manifest) == 25
    assert sum(m["expected"] == "keep" for m in manifest) == 12


def test_every_verdict_and_reason_matches_manifest(corpus_dir, manifest):
    mismatches = []
    for entry in manifest:
        result = filter_notebook(corpus_dir / entry["local_path"], entry["path"], id=entry["path"])
        expected_reasons = [] if entry["expected"] == "keep" else [entry["drop_reason"]]
        got = [r.value for r in result.reasons]
        if result.verdict.value != entry["expected"] or got != expected_reasons:
            mismatches.append((entry["local_path"], result.verdict.value, got, entry["expected"], expected_reasons))
    assert mismatches == []


def test_dependencies_match_manifest(corpus_dir, manifest):
    for entry in manifest:
        deps = extract_dependencies(load_notebook(corpus_dir / entry["local_path"]))
        expected = set(entry["data_files"]) | set(entry["missing_data_files"]) | set(entry.get("url_data") or [])
        assert {r.path for r in deps.refs} == expected, entry["local_path"]
        assert deps.unresolved == (), entry["local_path"]


def test_measured_facts_match_manifest(corpus_dir, manifest):
    """Code-line counts and pandas row counts agree with the corpus's own measurements."""
    for entry in manifest:
        result = filter_notebook(corpus_dir / entry["local_path"], entry["path"], id=entry["path"])
        verified = entry["verified"]
        assert result.facts.code_lines == verified["code_lines_noncomment"], entry["local_path"]
        rows = {f.path: f.rows for f in result.facts.files if f.kind.value == "pandas" and f.exists}
        expected_rows = {k: v["rows"] for k, v in verified["data_file_stats"].items() if v.get("rows") is not None}
        assert rows == expected_rows, entry["local_path"]


def test_missing_and_url_data_are_sft_only(corpus_dir, manifest):
    for entry in manifest:
        result = filter_notebook(corpus_dir / entry["local_path"], entry["path"], id=entry["path"])
        assert result.sft_only == (entry["drop_reason"] in {"missing_data", "url_data"}), entry["local_path"]


def test_missing_file_gets_its_download_link(corpus_dir, manifest):
    entry = next(m for m in manifest if m["path"].endswith("Logistic_Reg_sklearn_statsmodels.ipynb"))
    deps = extract_dependencies(load_notebook(corpus_dir / entry["local_path"]))
    (ref,) = deps.refs
    assert ref.path == "Data/hypothyroid.csv"
    assert any(u.endswith("/Datasets/hypothyroid.csv") for u in ref.source_urls)


def test_url_read_is_recorded(corpus_dir, manifest):
    entry = next(m for m in manifest if m["drop_reason"] == "url_data")
    result = filter_notebook(corpus_dir / entry["local_path"], entry["path"], id="x").to_dict()
    assert result["url_data"] == entry["url_data"]


def test_filter_stage_resumes_and_applies_caps(corpus_dir, tmp_path):
    report = run_filter(read_jsonl(corpus_dir / "MANIFEST.jsonl"), corpus_dir, tmp_path)
    assert report.processed == 25 and report.skipped == 0
    assert report.verdicts == {"keep": 12, "drop": 13}
    # stefmolin 2nd edition and ethen8181 each have 3 kept notebooks with complete data: one of each is capped
    capped = {r["id"]: r["cap_reason"] for r in read_jsonl(tmp_path / "capped.jsonl")}
    assert sorted(capped.values()) == ["repo_cap", "repo_cap"]
    assert {i.split("/")[0] for i in capped} == {"stefmolin", "ethen8181"}
    selected = list(read_jsonl(tmp_path / "selected.jsonl"))
    assert len(selected) == 10 + 3  # 10 complete + 3 SFT-only (2 missing data, 1 URL; one per repository)
    again = run_filter(read_jsonl(corpus_dir / "MANIFEST.jsonl"), corpus_dir, tmp_path)
    assert again.processed == 0 and again.skipped == 25
    assert len(list(read_jsonl(tmp_path / "filter.jsonl"))) == 25


def test_filter_cli(corpus_dir, tmp_path, repo_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "jupiter.cli", "nbqa", "filter", str(corpus_dir / "MANIFEST.jsonl"),
         "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=repo_dir, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["reasons"]["too_few_rows"] == 2 and report["verdicts"]["keep"] == 12
