"""The web page in a real headless Chromium (Selenium + the system chromedriver) against a real ``jupiter serve``.

The page is driven as a user would: fill the task form, attach the data file, submit, watch the tree grow from
the event stream, read the answer, click a node. Skipped, saying why, where Chromium, chromedriver or Selenium
is missing (``scripts/install.sh`` installs them). Set ``JUPITER_SERVE_SCREENSHOT=path.png`` to keep the
screenshot.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK, Server

from search.config import Mode
from search.settings import JobSettings
from tests.headless_chrome import headless_chrome, skip_without_chromium

skip_without_chromium()
pytest.importorskip("selenium.webdriver", reason="the browser test needs selenium (the dev extra)")

from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ANSWER = "@mean_fare[34.65]"
TOKEN = "browser-test-token"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def server(start_module_server) -> Server:
    return start_module_server("--llm", f"replay:{TITANIC_REPLAY}")


@pytest.fixture()
def browser() -> Iterator[object]:
    with headless_chrome() as driver:
        yield driver


def _wait(driver, condition, timeout: float = 60, message: str = ""):
    # the page redraws while a job runs: an element read in one poll may be replaced by the next, so a stale
    # element means "look again", not a failure
    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition, message)


def _fill(driver, element_id: str, text: str) -> None:
    # the settings' fields are built once the page has read the server's schema: wait for the field
    element = _wait(driver, lambda d: d.find_element(By.ID, element_id), timeout=10,
                    message=f"no field {element_id}")
    element.clear()
    element.send_keys(text)


def test_submit_watch_the_tree_and_read_the_answer(server: Server, browser, tmp_path: Path) -> None:
    task = json.loads(TITANIC_TASK.read_text())
    browser.get(server.url + "/")
    assert browser.title == "Jupiter"
    _fill(browser, "question", task["question"])
    _fill(browser, "constraints", task["constraints"])
    _fill(browser, "format", task["format"])
    _fill(browser, "label", task["label"])
    browser.find_element(By.ID, "files").send_keys(str(TITANIC_DATA.resolve()))
    browser.find_element(By.CSS_SELECTOR, "#settings summary").click()  # open the settings and set one
    _fill(browser, "s-seed", "0")
    browser.find_element(By.ID, "submit").click()

    _wait(browser, lambda d: d.find_element(By.ID, "job").is_displayed(), message="the job view did not open")
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tree circle.node")) >= 3,
          message="no tree nodes appeared")
    _wait(browser, lambda d: d.find_element(By.ID, "job-answer").text == ANSWER,
          message="the answer was not shown")
    _wait(browser, lambda d: d.find_element(By.ID, "job-status").text == "done")
    assert "submitted as job" in browser.find_element(By.ID, "message").text.lower()
    assert browser.find_element(By.ID, "job-question").text == task["question"]

    # the finished tree's own data drawn (the page redraws once when it arrives); then the answer node, on the
    # chosen path: a click shows its step
    _wait(browser, lambda d: d.find_element(By.ID, "tree-wrap").get_attribute("data-view") == "final")
    answer_nodes = browser.find_elements(By.CSS_SELECTOR, "#tree circle.kind-answer")
    assert answer_nodes
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", answer_nodes[0])
    _wait(browser, lambda d: ANSWER in d.find_element(By.ID, "detail").text, timeout=10)
    _wait(browser, lambda d: any(c.get_attribute("stroke") == "#2463eb"
                                 for c in d.find_elements(By.CSS_SELECTOR, "#tree circle.node")), timeout=10,
          message="the chosen path was not highlighted")
    node_count = len(browser.find_elements(By.CSS_SELECTOR, "#tree circle.node"))
    current = "#jobs tbody tr.current"
    _wait(browser, lambda d: any("done" in r.text and ANSWER in r.text for r in d.find_elements(By.CSS_SELECTOR,
                                                                                               current)), timeout=15)
    assert all(not b.get_attribute("disabled") for b in browser.find_elements(By.CSS_SELECTOR, "button.download"))

    # a download button saves the file (fetched with the token header, when there is one)
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    browser.find_element(By.CSS_SELECTOR, "button.download[data-name='solution.ipynb']").click()
    _wait(browser, lambda d: [p for p in downloads.glob("*-solution.ipynb")], timeout=20,
          message="solution.ipynb was not downloaded")
    notebook = json.loads(next(downloads.glob("*-solution.ipynb")).read_text())
    assert notebook["nbformat"] == 4 and notebook["cells"]

    # settings folded and the left column at its top: the form and the jobs list both in the picture
    browser.execute_script("document.getElementById('settings').open = false;"
                           "document.getElementById('left').scrollTop = 0;")
    shot = tmp_path / "serve.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == PNG_MAGIC and shot.stat().st_size > 10_000
    keep = os.environ.get("JUPITER_SERVE_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)

    # a reload, then opening the finished job: the stream replays every node
    browser.refresh()
    row = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs tbody tr"))[0]
    row.click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tree circle.node")) == node_count,
          message="the finished job's tree was not replayed")


def test_the_settings_form_is_the_servers_job_settings_model(server: Server, browser) -> None:
    browser.get(server.url + "/")
    browser.find_element(By.CSS_SELECTOR, "#settings summary").click()
    fields = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#settings [data-setting]"))
    assert [f.get_attribute("data-setting") for f in fields] == list(JobSettings.model_fields)
    mode = browser.find_element(By.ID, "s-mode")
    assert [o.get_attribute("value") for o in mode.find_elements(By.TAG_NAME, "option")] == \
        [""] + [m.value for m in Mode]
    runs = browser.find_element(By.ID, "s-vote_runs")
    assert (runs.get_attribute("type"), runs.get_attribute("min"), runs.get_attribute("data-type")) == \
        ("number", "1", "int")


def test_model_and_user_text_is_shown_as_text_never_as_markup(server: Server, browser) -> None:
    browser.get(server.url + "/")
    browser.find_element(By.ID, "kind-json").click()
    task = json.loads(TITANIC_TASK.read_text())
    task["question"] = 'Mean fare? <img src=x onerror="window.__pwned=1"><b>bold</b>'
    _fill(browser, "task-json", json.dumps(task))
    browser.find_element(By.ID, "files").send_keys(str(TITANIC_DATA.resolve()))
    browser.find_element(By.CSS_SELECTOR, "#settings summary").click()
    _fill(browser, "s-iterations", "2")
    browser.find_element(By.ID, "submit").click()
    _wait(browser, lambda d: d.find_element(By.ID, "job-question").text == task["question"])
    _wait(browser, lambda d: d.find_element(By.ID, "job-status").text in ("done", "failed", "cancelled"))
    assert browser.execute_script("return window.__pwned === undefined")
    assert not browser.find_elements(By.CSS_SELECTOR, "#job-question img, #jobs img, #job-question b")


def test_cancel_button_ends_the_job(server: Server, browser) -> None:
    browser.get(server.url + "/")
    task = json.loads(TITANIC_TASK.read_text())
    for field in ("question", "constraints", "format"):
        _fill(browser, field, task[field])
    browser.find_element(By.ID, "files").send_keys(str(TITANIC_DATA.resolve()))
    browser.find_element(By.CSS_SELECTOR, "#settings summary").click()
    _fill(browser, "s-iterations", "500")
    _fill(browser, "s-seed", "7")
    browser.find_element(By.ID, "submit").click()
    cancel = _wait(browser, lambda d: d.find_element(By.ID, "cancel") if d.find_element(By.ID, "job").is_displayed()
                   and d.find_element(By.ID, "job-status").text in ("queued", "running") else False)
    cancel.click()
    # cancelled while queued or running; a replay tree may also have run out of moves just before the click
    _wait(browser, lambda d: d.find_element(By.ID, "job-status").text in ("cancelled", "done"))
    assert cancel.get_attribute("disabled")


def test_bad_input_shows_the_servers_error(server: Server, browser) -> None:
    browser.get(server.url + "/")
    _fill(browser, "question", "What is the mean of column x?")
    browser.find_element(By.ID, "kind-json").click()
    _fill(browser, "task-json", '{"question": "mean?", "files": ["absent.csv"]}')
    browser.find_element(By.ID, "submit").click()
    message = _wait(browser, lambda d: d.find_element(By.ID, "message").text)
    assert "400" in message and "absent.csv" in message


def test_a_token_server_asks_for_the_token_and_keeps_it(start_server, browser) -> None:
    server = start_server("--llm", f"replay:{TITANIC_REPLAY}", token=TOKEN)
    browser.get(server.url + "/")
    _wait(browser, lambda d: d.find_element(By.ID, "token-overlay").is_displayed(),
          message="the page did not ask for the token")
    _fill(browser, "token", TOKEN)
    browser.find_element(By.ID, "token-save").click()
    _wait(browser, lambda d: not d.find_element(By.ID, "token-overlay").is_displayed())
    assert browser.execute_script("return sessionStorage.getItem('jupiter.token')") == TOKEN
    browser.find_element(By.CSS_SELECTOR, "#settings summary").click()
    _fill(browser, "s-seed", "0")  # the settings form, refused before the token, is built with it
    browser.find_element(By.ID, "files").send_keys(str(TITANIC_DATA.resolve()))
    task = json.loads(TITANIC_TASK.read_text())
    for field in ("question", "constraints", "format"):
        _fill(browser, field, task[field])
    browser.find_element(By.ID, "submit").click()
    # the tree needs the event stream, which carries the token as ?token=
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tree circle.node")) >= 3)
    _wait(browser, lambda d: d.find_element(By.ID, "job-answer").text == ANSWER)
    assert not browser.find_element(By.ID, "token-overlay").is_displayed()


SLOW_STEP = "Thought: wait a little.\nAction:\n```python\nimport time\ntime.sleep(0.7)\nprint('slept', {i})\n```"


@pytest.mark.slow
def test_the_page_follows_a_job_through_a_server_crash_and_restart(start_server, tmp_path: Path,
                                                                   browser) -> None:
    """kill -9 of the server mid-job: the page's stream reconnects to the restarted server, redraws the
    continued tree from the root and ends with the job done."""
    replay = tmp_path / "slow.replay.json"
    replay.write_text(json.dumps({"rules": [], "default": [SLOW_STEP.format(i=i) for i in range(3)]}))
    server = start_server("--llm", f"replay:{replay}", name="first")
    browser.get(server.url + "/")
    for field in ("question", "format"):
        _fill(browser, field, "wait")
    browser.find_element(By.CSS_SELECTOR, "#settings summary").click()
    _fill(browser, "s-iterations", "6")
    _fill(browser, "s-expansions", "1")
    browser.find_element(By.ID, "submit").click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tree circle.node")) >= 3)
    assert browser.find_element(By.ID, "job-status").text == "running"
    server.kill9()
    server = start_server("--llm", f"replay:{replay}", db=server.db, data_root=server.data_root, port=server.port,
                          name="restarted")
    # the re-queued job continues its tree: the drawing is reset, redrawn and grows to the end
    _wait(browser, lambda d: d.find_element(By.ID, "job-status").text == "done", timeout=120,
          message="the page did not follow the restarted job to its end")
    nodes = browser.find_elements(By.CSS_SELECTOR, "#tree circle.node")
    assert len(nodes) == 7  # the root and one node per iteration, drawn once each
    from jupiter.client import Client

    assert Client(server.url).list()[0]["attempts"] == 2  # it really was cut and run again
