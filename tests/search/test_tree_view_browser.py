"""tree.html in a real headless Chromium (Selenium + the system chromedriver), opened from disk as a user would.

A 150-node tree (and a 500-node one) written by ``write_outputs``, the code ``jupiter solve`` writes with: it
renders and fits the window, its answer chips never overlap (bounding boxes measured in the browser), the vote
table is result.json's, a click on a row highlights that answer's nodes, a click on a node opens it in the side
panel, zoom / fit / collapse work, and model text carrying ``<script>`` is shown as text. One browser serves the
module (about 10 s in all), so these run in the default suite. The slow test grows a 151-node tree with the
real engine (real sandbox, the simulated policy over DABench question 24's reference solutions, 50 iterations)
and checks the same in its page; ``JUPITER_TREE_SCREENSHOT=path.png`` keeps a screenshot of that page (how
docs/images/tree-150.png is made). Skipped, saying why, where Chromium, chromedriver or Selenium is missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from viewer_trees import LABEL, QUESTION, decided, wide_tree

from jupiter.answers import reward
from search.outputs import write_outputs
from tests.headless_chrome import headless_chrome, skip_without_chromium

skip_without_chromium()
pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium (the dev extra)")

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

HOSTILE = "</script><script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"><b>bold</b>"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: Every pair of shapes whose boxes intersect by more than half a pixel (chips against chips and against other
#: nodes' dots; a chip's own dot touches it by design). Measured in the page, in screen pixels.
OVERLAPS_JS = """
const boxes = [];
for (const g of document.querySelectorAll('#tree g.tv-node')) {
  const tag = g.getAttribute('data-tag');
  const chip = g.querySelector('rect.chip'), dot = g.querySelector('circle.node');
  if (chip) boxes.push({tag: tag, what: 'chip', r: chip.getBoundingClientRect()});
  if (dot) boxes.push({tag: tag, what: 'dot', r: dot.getBoundingClientRect()});
}
const bad = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const a = boxes[i], b = boxes[j];
  if (a.tag === b.tag || (a.what === 'dot' && b.what === 'dot')) continue;
  const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
  const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
  if (w > 0.5 && h > 0.5) bad.push([a.tag, a.what, b.tag, b.what]);
}
return {chips: boxes.filter(b => b.what === 'chip').length, overlaps: bad};
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with headless_chrome("1600,1000", "--allow-file-access-from-files") as driver:
        yield driver


def _write(folder: Path, size: int, **tree_args: Any) -> tuple[Path, dict]:
    result = decided(wide_tree(size, **tree_args))
    write_outputs(result, folder)
    return folder / "tree.html", json.loads((folder / "result.json").read_text())


@pytest.fixture(scope="module")
def page150(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    return _write(tmp_path_factory.mktemp("tree150"), 150)


def _open(driver: Any, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tree circle.node"))


def _click(driver: Any, element: Any) -> None:
    driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", element)


def _vote_rows(driver: Any) -> list[tuple[str, int, str]]:
    """The vote table on screen: (normalised answer, votes, label mark) per row."""
    return [(r.find_element(By.CSS_SELECTOR, ".tv-vote-key").text,
             int(r.find_element(By.CSS_SELECTOR, ".tv-vote-count").text),
             r.find_element(By.CSS_SELECTOR, ".tv-vote-match").text)
            for r in driver.find_elements(By.CSS_SELECTOR, "tr.tv-vote-row")]


def _scale(driver: Any) -> float:
    return driver.execute_script("return document.querySelector('#tree g.tv-viewport').transform.baseVal"
                                 ".consolidate().matrix.a")


def test_a_150_node_tree_renders_whole_inside_the_window(browser: Any, page150: tuple[Path, dict]) -> None:
    page, record = page150
    _open(browser, page)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tree circle.node")) == 150 == record["nodes"]
    answers = sum(1 for c in record["candidates"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tree rect.chip")) == answers
    inside = browser.execute_script(
        "const s = document.getElementById('tree').getBoundingClientRect();"
        "const t = document.querySelector('#tree g.tv-viewport').getBoundingClientRect();"
        "return [t.left >= s.left - 1, t.right <= s.right + 1, t.top >= s.top - 1, t.bottom <= s.bottom + 1,"
        "        t.width > s.width * 0.3 || t.height > s.height * 0.5];")
    assert all(inside), inside  # fitted: all of it in view, and not a speck in a corner
    assert browser.find_element(By.CSS_SELECTOR, "#header h1").text == QUESTION  # the question, not the task id
    assert "decided by vote" in browser.find_element(By.CSS_SELECTOR, "#header .tv-decision").text
    assert browser.execute_script("return window.__pwned") is None
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


@pytest.mark.parametrize("size", [150, 500])
def test_answer_chips_never_overlap(browser: Any, tmp_path: Path, size: int) -> None:
    page, record = _write(tmp_path, size, seed=size)
    _open(browser, page)
    measured = browser.execute_script(OVERLAPS_JS)
    assert measured["chips"] == len(record["candidates"]) > 20
    assert measured["overlaps"] == []
    browser.find_element(By.CSS_SELECTOR, ".tv-toolbar button:nth-child(2)").click()  # zoom in: still apart
    assert browser.execute_script(OVERLAPS_JS)["overlaps"] == []


def test_the_vote_table_is_result_jsons_and_a_row_highlights_its_nodes(browser: Any,
                                                                       page150: tuple[Path, dict]) -> None:
    page, record = page150
    _open(browser, page)
    rows = browser.find_elements(By.CSS_SELECTOR, "#header tr.tv-vote-row")
    expected = [(e["key"], e["count"], "✓" if reward(e["answer"], LABEL) == 1.0 else "✗")
                for e in record["vote_table"]]
    assert _vote_rows(browser) == expected
    second = record["vote_table"][1]
    _click(browser, rows[1])
    tags = {c["tag"] for c in record["candidates"] if c["key"] == second["key"]}
    lit = {g.get_attribute("data-tag") for g in browser.find_elements(By.CSS_SELECTOR, "#tree g.chip.hl")}
    assert lit == tags
    assert "active" in browser.find_elements(By.CSS_SELECTOR, "#header tr.tv-vote-row")[1].get_attribute("class")
    dimmed = browser.execute_script(
        "return Array.from(document.querySelectorAll('#tree g.tv-node:not(.hl)'))"
        ".map(g => getComputedStyle(g).opacity)")
    assert dimmed and all(float(o) < 0.5 for o in dimmed)
    _click(browser, browser.find_elements(By.CSS_SELECTOR, "#header tr.tv-vote-row")[1])  # again: off
    assert not browser.find_elements(By.CSS_SELECTOR, "#tree g.chip.hl")


def test_a_click_opens_the_node_in_the_side_panel(browser: Any, page150: tuple[Path, dict]) -> None:
    page, record = page150
    _open(browser, page)
    long = next(c for c in record["candidates"] if "@median_fare" in c["answer"])
    chip = browser.find_element(By.CSS_SELECTOR, f"#tree g.chip[data-tag='{long['tag']}']")
    label = chip.find_element(By.CSS_SELECTOR, "text.chip-text").text
    assert label.startswith("34.65 · 14.45") and label.endswith("…")  # cut on the chip ...
    chip.click()
    detail = browser.find_element(By.ID, "detail").text
    assert long["answer"] in detail and long["tag"] in detail  # ... whole in the panel
    step = browser.find_element(By.CSS_SELECTOR, "#tree circle.kind-step")
    _click(browser, step)
    detail = browser.find_element(By.ID, "detail").text
    assert "Thought" in detail and "df['Fare']" in detail
    assert "selected" in step.get_attribute("class")


def test_zoom_pan_fit_and_collapse(browser: Any, page150: tuple[Path, dict]) -> None:
    page, _record = page150
    _open(browser, page)
    fitted = _scale(browser)
    svg = browser.find_element(By.ID, "tree")
    browser.execute_script("arguments[0].dispatchEvent(new WheelEvent('wheel', {deltaY: -400, clientX: 300, "
                           "clientY: 300, bubbles: true, cancelable: true}))", svg)
    assert _scale(browser) > fitted * 1.5
    browser.find_element(By.CSS_SELECTOR, ".tv-fit").click()
    assert _scale(browser) == pytest.approx(fitted)
    # a drag on the background pans (and selects nothing); a click afterwards still opens a node
    before = browser.execute_script("return document.querySelector('#tree g.tv-viewport').transform.baseVal"
                                    ".consolidate().matrix.e")
    ActionChains(browser).move_to_element_with_offset(svg, -svg.size["width"] // 2 + 8, 0).click_and_hold() \
        .move_by_offset(60, 10).move_by_offset(60, 10).release().perform()
    after = browser.execute_script("return document.querySelector('#tree g.tv-viewport').transform.baseVal"
                                   ".consolidate().matrix.e")
    assert after == pytest.approx(before + 120, abs=2)
    assert "Click a node" in browser.find_element(By.ID, "detail").text
    browser.find_element(By.CSS_SELECTOR, "#tree g.chip").click()
    assert "Answer" in browser.find_element(By.ID, "detail").text
    browser.find_element(By.CSS_SELECTOR, ".tv-fit").click()
    # a double-click folds the root's first child away into a "+N" badge; expand all brings it back
    first = browser.find_element(By.CSS_SELECTOR, "#tree g.tv-node[data-tag='0.1']")
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('dblclick', {bubbles: true}))", first)
    hidden = sum(1 for c in json.loads(Path(page).parent.joinpath("tree.json").read_text())
                 if c["tag"].startswith("0.1."))
    assert hidden > 0
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tree circle.node")) == 150 - hidden
    assert browser.find_element(By.CSS_SELECTOR, "#tree text.badge-text").text == f"+{hidden}"
    browser.find_element(By.CSS_SELECTOR, ".tv-expand-all").click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tree circle.node")) == 150


def test_model_text_with_script_tags_is_shown_as_text(browser: Any, tmp_path: Path) -> None:
    page, _ = _write(tmp_path, 40, seed=2, thought=HOSTILE, question="Mean fare? " + HOSTILE)
    _open(browser, page)
    assert browser.find_element(By.CSS_SELECTOR, "#header h1").text == "Mean fare? " + HOSTILE
    _click(browser, browser.find_element(By.CSS_SELECTOR, "#tree circle.kind-step"))
    assert HOSTILE in browser.find_element(By.ID, "detail").text
    assert browser.execute_script("return window.__pwned") is None
    assert not browser.find_elements(By.CSS_SELECTOR, "img, [onerror]")
    assert not [b for b in browser.find_elements(By.TAG_NAME, "b") if b.text == "bold"]
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 3  # the data, the viewer, the call: none added


@pytest.mark.slow
def test_an_engine_tree_of_150_nodes_renders_and_reads(browser: Any, tmp_path: Path, dabench_dir: Path) -> None:
    """The real search (real sandbox) with the simulated policy: ~20 s of cells, then the page."""
    from benchmarks.perf.sim_policy import SimulatedPolicy, load_solutions, task_for
    from sandbox import Sandbox, SandboxConfig
    from search import Mode, SearchConfig, run_search

    if not (dabench_dir / "tables").is_dir():
        pytest.skip(f"DABench tables not found under {dabench_dir}")
    (question,) = [q for q in load_solutions() if q.id == 24]
    with Sandbox(SandboxConfig(max_live_states=256)) as sandbox:
        result = run_search(task_for(question, dabench_dir), SimulatedPolicy([question]), sandbox,
                            SearchConfig(mode=Mode.INFER, iterations=50), value=None, seed=0)
    write_outputs(result, tmp_path)
    record = json.loads((tmp_path / "result.json").read_text())
    assert record["nodes"] >= 150 and len(record["vote_table"]) >= 2
    _open(browser, tmp_path / "tree.html")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#tree circle.node")) == record["nodes"]
    measured = browser.execute_script(OVERLAPS_JS)
    assert measured["chips"] == len(record["candidates"]) and measured["overlaps"] == []
    shown = [(key, count) for key, count, _ in _vote_rows(browser)]
    assert shown == [(e["key"], e["count"]) for e in record["vote_table"]]
    assert browser.find_element(By.CSS_SELECTOR, "#header h1").text == question.question
    browser.find_element(By.CSS_SELECTOR, f"#tree g.chip[data-tag='{record['chosen_tag']}']").click()
    assert record["answer"] in browser.find_element(By.ID, "detail").text
    keep = os.environ.get("JUPITER_TREE_SCREENSHOT")
    if keep:
        assert browser.save_screenshot(keep) and Path(keep).read_bytes()[:8] == PNG_MAGIC
