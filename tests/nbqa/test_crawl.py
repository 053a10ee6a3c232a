"""The crawler against a real 127.0.0.1 server that answers like the GitHub API (tests/nbqa/github_server.py).

The fixture repositories are the real corpus notebooks and data files, so a crawl followed by the filter
stage must reproduce the MANIFEST verdicts. Sleeps are injected: nothing waits for real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nbqa_pipeline.crawl import CrawlConfig, crawl, repo_slug, state_path
from nbqa_pipeline.filter_stage import run_filter
from nbqa_pipeline.github import GitHubClient, GitHubError
from nbqa_pipeline.jsonl import read_jsonl
from tests.nbqa.github_server import Fault, Fixture, GitHubFixtureServer

NOW = 1_700_000_000.0


def _fixture(corpus_dir: Path, manifest: list[dict]) -> Fixture:
    repos: dict[str, dict] = {}
    for entry in manifest:
        slug = entry["local_path"][: -len(entry["path"])].rstrip("/")
        if entry["repo"] in repos:
            continue
        files = {
            p.relative_to(corpus_dir / slug).as_posix(): p.read_bytes()
            for p in sorted((corpus_dir / slug).rglob("*")) if p.is_file() and p.name != "LICENSE"
        }
        repos[entry["repo"]] = {"default_branch": "main", "license": entry["license"], "files": files}
    return Fixture(repos=repos, result_cap=4)


class FakeTime:
    def __init__(self) -> None:
        self.now = NOW
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 3))
        self.now += seconds

    def clock(self) -> float:
        return self.now


def _config(**kw) -> CrawlConfig:
    return CrawlConfig(queries=("read_csv extension:ipynb",), min_size=0, max_size=4_000_000, per_page=2,
                       result_cap=4, **kw)


def test_crawl_shards_paginates_survives_limits_and_feeds_filter(corpus_dir, manifest, tmp_path):
    fixture = _fixture(corpus_dir, manifest)
    fixture.faults = [
        Fault("/search/code", 403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 30)}),
        Fault("/repos/", 429, {"Retry-After": "7"}, {"message": "You have exceeded a secondary rate limit"}),
        Fault("/repos/", 502, {}, {"message": "bad gateway"}),
    ]
    fake = FakeTime()
    out = tmp_path / "crawl"
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, token="t0k", cache_dir=out / "etag-cache", sleep=fake.sleep,
                              clock=fake.clock, server_backoff=2.0)
        report = crawl(client, out, _config())
    # reset - now + 1; Retry-After; then the 502 on the retry of that same request backs off 2 * 2**1
    assert fake.sleeps == [31.0, 7.0, 4.0]
    assert report.client["primary_waits"] == 1 and report.client["secondary_waits"] == 1
    assert report.candidates == 25
    assert report.shards_searched > 1 and report.shards_overflowing == 0  # split until every shard fits
    assert any(r["query"].get("page") == "2" for r in fixture.log if r["path"] == "/search/code")
    assert all(r["auth"] == "Bearer t0k" for r in fixture.log)
    assert report.notebooks == {"ok": 25}
    records = {r["id"]: r for r in read_jsonl(out / "notebooks.jsonl")}
    hypo = records["tirthajyoti/Machine-Learning-with-Python/Classification/Logistic_Reg_sklearn_statsmodels.ipynb"]
    assert [f["status"] for f in hypo["data_files"]] == ["missing"] and hypo["sft_only"] is True
    assert hypo["data_files"][0]["source_urls"]  # the commented-out wget link
    url_nb = next(r for r in records.values() if r["url_data"])
    assert url_nb["url_data"][0].endswith("/heart.csv") and url_nb["data_complete"] is False
    keras = records["PacktWorkshops/The-Deep-Learning-with-Keras-Workshop/Chapter04/Exercise4.03/Exercise4_03.ipynb"]
    assert keras["data_files"][0]["repo_path"] == "Chapter04/data/qsar_fish_toxicity.csv"
    assert (out / "files" / repo_slug(keras["repo"]) / "Chapter04/data/qsar_fish_toxicity.csv").is_file()
    # the crawl output is the filter stage's input; verdicts must be the corpus's own
    run_filter(read_jsonl(out / "notebooks.jsonl"), out, tmp_path / "filter", diversity=None)
    verdicts = {r["id"]: r["reasons"] for r in read_jsonl(tmp_path / "filter" / "filter.jsonl")}
    for entry in manifest:
        expected = [] if entry["expected"] == "keep" else [entry["drop_reason"]]
        assert verdicts[f"{entry['repo']}/{entry['path']}"] == expected, entry["path"]


def test_etag_cache_answers_304_and_404s_are_none(corpus_dir, manifest, tmp_path):
    """With a token, as a crawl runs: GitHub's ``Vary: Authorization`` must not turn every revalidation into a miss."""
    fixture = _fixture(corpus_dir, manifest)
    fake = FakeTime()
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, token="t0k", cache_dir=tmp_path / "cache", sleep=fake.sleep,
                              clock=fake.clock)
        first = client.repository("ethen8181/machine-learning")
        second = client.repository("ethen8181/machine-learning")
        assert first == second and first["license"] == {"spdx_id": "MIT"}
        assert client.stats.not_modified == 1
        assert fixture.log[-1]["if_none_match"] and fixture.log[0]["if_none_match"] is None
        assert client.repository("nobody/nothing") is None
        assert client.file_bytes("ethen8181/machine-learning", "no/such.csv", "main") is None
        assert client.stats.not_found == 2
        fresh = GitHubClient(server.url, token="t0k", cache_dir=tmp_path / "cache", sleep=fake.sleep,
                             clock=fake.clock)
        assert fresh.repository("ethen8181/machine-learning") == first  # the cache is on disk
        assert fresh.stats.not_modified == 1
    assert fake.sleeps == []


def test_forbidden_without_rate_limit_is_an_error(tmp_path):
    fixture = Fixture(repos={}, faults=[Fault("/repos/", 403, {}, {"message": "Resource not accessible"})])
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, sleep=lambda s: None)
        with pytest.raises(GitHubError, match="forbidden"):
            client.repository("a/b")


def test_rate_limit_retries_are_bounded(tmp_path):
    faults = [Fault("/repos/", 429, {"Retry-After": "1"}) for _ in range(5)]
    fixture = Fixture(repos={"a/b": {"files": {}}}, faults=faults)
    fake = FakeTime()
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, sleep=fake.sleep, clock=fake.clock, max_retries=3)
        with pytest.raises(GitHubError, match="rate-limited"):
            client.repository("a/b")
        assert fake.sleeps == [1.0, 1.0, 1.0]


def test_used_up_quota_on_a_success_waits_before_the_next_request():
    body = {"full_name": "a/b", "default_branch": "main", "license": None}
    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(NOW) + 10)}
    fixture = Fixture(repos={"a/b": {"files": {}}}, faults=[Fault("/repos/a/b", 200, headers, body)])
    fake = FakeTime()
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, sleep=fake.sleep, clock=fake.clock)
        assert client.repository("a/b")["full_name"] == "a/b"
        assert fake.sleeps == []
        assert client.repository("a/b")["default_branch"] == "main"
    assert fake.sleeps == [11.0] and client.stats.primary_waits == 1


def test_crawl_resumes_after_a_kill(corpus_dir, manifest, tmp_path, repo_dir):
    fixture = _fixture(corpus_dir, manifest)
    hang = "/repos/stefmolin/Hands-On-Data-Analysis-with-Pandas/contents/ch_10/planets_ml.ipynb"
    fixture.hang = {hang}
    out = tmp_path / "crawl"
    with GitHubFixtureServer(fixture) as server:
        cmd = [sys.executable, "-m", "jupiter.cli", "nbqa", "crawl", "--api-url", server.url, "--out", str(out),
               "--min-size", "0", "--max-size", "4000000", "--per-page", "2", "--result-cap", "4"]
        env = dict(os.environ, GITHUB_TOKEN="")
        proc = subprocess.Popen(cmd, cwd=repo_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            while not any(r["path"] == hang for r in list(fixture.log)):
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "crawler never reached the hanging download"
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        fixture.release.set()
        before = {r["id"] for r in read_jsonl(out / "notebooks.jsonl")}
        assert 0 < len(before) < 25
        state = json.loads(state_path(out, "read_csv extension:ipynb").read_text())
        assert state["done"] is True
        fixture.log.clear()
        client = GitHubClient(server.url, sleep=lambda s: None)
        report = crawl(client, out, CrawlConfig(min_size=0, max_size=4_000_000))
    assert report.notebooks == {"ok": 25}
    ids = [r["id"] for r in read_jsonl(out / "notebooks.jsonl")]
    assert len(ids) == len(set(ids)) == 25
    refetched = {r["path"] for r in fixture.log}
    assert not any(p == "/search/code" for p in refetched)
    for nid in before:
        repo, path = nid.split("/", 2)[:2], nid.split("/", 2)[2]
        assert f"/repos/{'/'.join(repo)}/contents/{path}" not in refetched


def test_a_failed_download_is_left_for_the_rerun(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import pandas as pd\ndf = pd.read_csv('d/x.csv')", execution_count=1)]
    files = {"a/nb.ipynb": nbformat.writes(nb).encode(), "a/d/x.csv": b"a\n1\n"}
    fixture = Fixture(repos={"o/r": {"files": files, "license": "MIT"}},
                      faults=[Fault("/repos/o/r/contents/a/d/x.csv", 403, {}, {"message": "blocked"})])
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, sleep=lambda s: None)
        config = CrawlConfig(queries=("read_csv extension:ipynb", "read_excel extension:ipynb"), min_size=0,
                             max_size=10**6)
        first = crawl(client, tmp_path, config)
        assert first.notebooks == {} and first.candidates == 1  # both queries find it; kept once
        assert first.shards_searched == 2
        second = crawl(client, tmp_path, config)
    assert second.notebooks == {"ok": 1} and second.data_files == {"present": 1, "url": 0}
    (record,) = read_jsonl(tmp_path / "notebooks.jsonl")
    assert record["license"] == "MIT" and record["data_complete"] is True
    assert record["data_files"][0]["repo_path"] == "a/d/x.csv"


def test_search_resumes_at_the_saved_page(corpus_dir, manifest, tmp_path):
    fixture = _fixture(corpus_dir, manifest)
    fixture.faults = [Fault("/search/code", 403, {}, {"message": "forbidden"}, query="&page=2")]
    with GitHubFixtureServer(fixture) as server:
        client = GitHubClient(server.url, sleep=lambda s: None)
        with pytest.raises(GitHubError, match="forbidden"):
            crawl(client, tmp_path, _config())
        found_before = len(list(read_jsonl(tmp_path / "candidates.jsonl")))
        assert 0 < found_before < 25  # the pages read before the failure
        fixture.log.clear()
        report = crawl(client, tmp_path, _config())
    first_search = next(r for r in fixture.log if r["path"] == "/search/code")
    assert first_search["query"]["page"] == "2"  # continued from the saved next-page link
    assert report.candidates == 25 and report.notebooks == {"ok": 25}
