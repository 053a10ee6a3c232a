"""The service page draws its trees with the same viewer as tree.html, fed the same JSON.

A real ``jupiter serve`` (replay policy) runs a job; the server hands out ``search/static/tree_view.js`` itself
as ``/static/tree_view.js`` (the very file tree.html inlines), and in headless Chromium the page shows the
finished job's tree with the engine's normalised vote (the same rows as the job's result), opens a node on
click, and shows model text carrying ``<script>`` as text. The browser part is skipped, saying why, where
Chromium, chromedriver or Selenium is missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from serve_helpers import TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK, Server

from jupiter.client import Client
from search.html import TREE_VIEW_JS, extract_view_data
from tests.headless_chrome import headless_chrome

HOSTILE = "</script><script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"><b>bold</b>"


@pytest.fixture(scope="module")
def served(start_module_server, tmp_path_factory: pytest.TempPathFactory) -> tuple[Server, str, dict]:
    """A server whose replay policy also writes a step with markup in its thought, and one finished job."""
    folder = tmp_path_factory.mktemp("serve-viewer")
    script = json.loads(TITANIC_REPLAY.read_text())
    script["rules"][0]["replies"].append(f"Thought: {HOSTILE}\nAction:\n```python\nprint('hostile')\n```")
    script["rules"][0]["logprobs"].append(-2.0)
    replay = folder / "replay.json"
    replay.write_text(json.dumps(script))
    server = start_module_server("--llm", f"replay:{replay}", name="viewer")
    client = Client(server.url)
    job_id = client.submit(TITANIC_TASK, [TITANIC_DATA], {"iterations": 10, "seed": 0})
    job = client.wait(job_id, timeout=120)
    assert job["status"] == "done", job
    return server, job_id, job


def test_the_server_serves_the_viewer_tree_html_inlines(served: tuple[Server, str, dict]) -> None:
    server, job_id, job = served
    source = TREE_VIEW_JS.read_bytes()
    resp = requests.get(server.url + "/static/tree_view.js", timeout=10)
    assert resp.status_code == 200 and resp.content == source
    assert "javascript" in resp.headers["content-type"]
    page = requests.get(server.url + "/", timeout=10).text
    assert page.index('src="/static/tree_view.js"') < page.index('src="/static/app.js"')
    tree_html = requests.get(f"{server.url}/v1/tasks/{job_id}/tree.html", timeout=10).text
    assert source.decode("utf-8") in tree_html  # the download draws with the same file
    data = extract_view_data(tree_html)
    rows = [(r["key"], r["answer"], r["count"]) for r in data["vote"]]
    assert rows == [(r["key"], r["answer"], r["count"]) for r in job["result"]["vote_table"]] and rows
    assert data["answer"] == job["result"]["answer"] and data["chosen_tag"] == job["result"]["chosen_tag"]


@pytest.fixture()
def browser() -> Iterator[Any]:
    with headless_chrome() as driver:
        yield driver


def test_the_page_shows_the_finished_tree_with_the_engines_vote(served: tuple[Server, str, dict],
                                                                browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server, job_id, job = served
    result = job["result"]
    browser.get(server.url + "/")
    row = WebDriverWait(browser, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, f"#jobs tbody tr[data-id='{job_id}']"))[0]
    row.click()
    # the finished tree's own data: the engine's vote replaces the page's grouping by answer text
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.ID, "tree-wrap").get_attribute("data-view") == "final",
        "the page did not read the finished tree's view data")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tree circle.node")) == result["nodes"]
    shown = [(r.find_element(By.CSS_SELECTOR, ".tv-vote-key").text,
              int(r.find_element(By.CSS_SELECTOR, ".tv-vote-count").text),
              r.find_element(By.CSS_SELECTOR, ".tv-vote-match").text)
             for r in browser.find_elements(By.CSS_SELECTOR, "#vote tr.tv-vote-row")]
    assert [(k, c) for k, c, _ in shown] == [(e["key"], e["count"]) for e in result["vote_table"]]
    assert shown[0][2] == ("✓" if result["correct"] else "✗")
    assert "decided by vote" in browser.find_element(By.CSS_SELECTOR, "#vote .tv-decision").text
    # a click on the chosen answer's chip opens it; the step with markup in its thought shows it as text
    browser.find_element(By.CSS_SELECTOR, f"#tree g.chip[data-tag='{result['chosen_tag']}']").click()
    assert result["answer"] in browser.find_element(By.ID, "detail").text
    tree = requests.get(f"{server.url}/v1/tasks/{job_id}/tree.json", timeout=10).json()
    hostile = next(n["tag"] for n in tree if n["thought"] == HOSTILE)
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))",
                           browser.find_element(By.CSS_SELECTOR, f"#tree circle.node[data-tag='{hostile}']"))
    assert HOSTILE in browser.find_element(By.ID, "detail").text
    assert browser.execute_script("return window.__pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "#detail img, #detail b, [onerror]")
