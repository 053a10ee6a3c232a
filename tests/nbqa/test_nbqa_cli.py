"""The whole pipeline through its command line (``jupiter nbqa``), on one real notebook."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nbqa_pipeline.jsonl import read_jsonl
from tests.nbqa.llm_server import ScriptedLLM, scripted_server
from tests.nbqa.test_nbqa_extract import NB_PATH, good_script


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> dict:
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "nbqa", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_filter_extract_verify_export_stats_cli(corpus_dir, manifest, tmp_path, repo_dir):
    entry = next(m for m in manifest if m["path"] == NB_PATH)
    (tmp_path / "in.jsonl").write_text(json.dumps(entry) + "\n")
    filt = _run(["filter", str(tmp_path / "in.jsonl"), "--root", str(corpus_dir), "--out", str(tmp_path / "f")],
                repo_dir)
    assert filt["verdicts"] == {"keep": 1} and filt["selected"] == 1
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBQA_LLM", "OPENAI"))}
    llm = ScriptedLLM(good_script())
    with scripted_server(llm) as server:
        ext = _run(["extract", str(tmp_path / "f" / "selected.jsonl"), "--root", str(corpus_dir),
                    "--out", str(tmp_path / "e"), "--llm-url", server.url, "--model", "m", "--concurrency", "1",
                    "--price-prompt", "1", "--price-completion", "1"], repo_dir, env)
    assert ext["notebooks"] == {"ok": 1} and ext["splits"] == {"complete_low_randomness": 1}
    assert ext["usage"]["prompt_tokens"] == 700 and ext["usage"]["cost"] > 0
    extract_file = str(tmp_path / "e" / "extract.jsonl")
    pytest.importorskip("sandbox")
    ver = _run(["verify", extract_file, "--root", str(corpus_dir), "--out", str(tmp_path / "v")], repo_dir)
    assert ver["outcomes"] == {"reproduced": 1} and ver["reproduced_share"] == 1.0
    exp = _run(["export", extract_file, "--root", str(corpus_dir), "--verify", str(tmp_path / "v" / "verify.jsonl"),
                "--out", str(tmp_path / "x")], repo_dir)
    assert exp["nbqa_records"] == 1 and exp["sft_samples"] == 1 and exp["verified"] == {"True": 1}
    (record,) = read_jsonl(tmp_path / "x" / "nbqa.jsonl")
    assert record["verified"] is True
    stats = _run(["stats", "--filter", str(tmp_path / "f" / "filter.jsonl"), "--extract", extract_file,
                  "--nbqa", str(tmp_path / "x" / "nbqa.jsonl"), "--verify", str(tmp_path / "v" / "verify.jsonl"),
                  "--out", str(tmp_path / "r")], repo_dir)
    assert stats["nbqa_records"] == 1
    report = (tmp_path / "r" / "report.md").read_text()
    assert "100.0%" in report and (tmp_path / "r" / "solution_lengths.png").is_file()


def test_cli_errors_name_the_problem(tmp_path, repo_dir):
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "nbqa", "filter", str(tmp_path / "nope.jsonl"),
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=repo_dir, timeout=120)
    assert proc.returncode == 2 and "nope.jsonl: no such file" in proc.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBQA_LLM", "OPENAI"))}
    (tmp_path / "s.jsonl").write_text("")
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "nbqa", "extract", str(tmp_path / "s.jsonl"), "--root",
                           str(tmp_path), "--out", str(tmp_path / "o")], capture_output=True, text=True, cwd=repo_dir,
                          timeout=120, env=env)
    assert proc.returncode == 2 and "NBQA_LLM_BASE_URL" in proc.stderr
