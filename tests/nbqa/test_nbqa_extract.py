"""LLM stages against a real 127.0.0.1 OpenAI-compatible server with scripted replies (tests/nbqa/llm_server.py)."""

from __future__ import annotations

import json

import pytest

from nbqa_pipeline.extract import (
    ExtractConfig,
    ReplyError,
    extract_notebook,
    is_classical,
    parse_json_reply,
    randomness_level,
    run_extract,
)
from nbqa_pipeline.filters import filter_notebook
from nbqa_pipeline.jsonl import read_jsonl
from nbqa_pipeline.llm_client import ChatClient, LLMConfig, LLMError
from tests.nbqa.llm_server import ScriptedLLM, scripted_server

NB_PATH = "Chapter03/Exercise3.04/Exercise_3_04.ipynb"

TASK = {"task": "Fit a quadratic trend of the yearly mean regional temperature (years after 1901) on Year and "
                "Year squared. What is the R squared of the fit?",
        "answer": "0.9313996496373635", "concepts": ["Machine Learning", "Time Series Analysis"],
        "difficulty": "medium"}
CFL = {"constraints": "Keep rows with Year > 1901, average RgnAvTemp per Year, fit LinearRegression with an "
                      "intercept on Year and Year**2, report the in-sample R squared.",
       "format": "@r_squared[value] where value is a float rounded to 4 decimals",
       "label": "@r_squared[0.9314]"}
SOLUTION = {"steps": [
    {"thought": "Load the data and keep the years after 1901.",
     "python_code": "import pandas as pd\ndf = pd.read_csv('../Datasets/synth_temp.csv')\ndf = df.loc[df.Year > 1901]",
     "code_output": ""},
    {"thought": "Average per year and add the squared year.",
     "python_code": "g = df.groupby(['Year']).agg({'RgnAvTemp': 'mean'})\ng['Year'] = g.index\n"
                    "g = g.rename(columns={'RgnAvTemp': 'AvTemp'})\ng['Year2'] = g['Year']**2",
     "code_output": ""},
    {"thought": "Fit the quadratic trend and print R squared.",
     "python_code": "from sklearn.linear_model import LinearRegression\nm = LinearRegression(fit_intercept=True)\n"
                    "m.fit(g.loc[:, ['Year', 'Year2']], g.AvTemp)\n"
                    "print('r squared = ', round(m.score(g.loc[:, ['Year', 'Year2']], g.AvTemp), 4))",
     "code_output": "r squared =  0.9314"}],
    "final_label": "@r_squared[0.9314]"}
YES5 = {"checks": {k: "yes" for k in ("answerable_from_data", "answer_in_notebook", "unambiguous", "no_leak",
                                      "solution_reaches_answer")}, "reason": "fine"}
YES3 = {"checks": {k: "yes" for k in ("constraints_consistent", "format_matches_label", "label_matches_outputs")}}


def good_script(**over):
    script = {
        "quality": [json.dumps({"score": 4, "reason": "clear regression walk-through"})],
        "models": [json.dumps({"models": ["Linear Regression"]})],
        "tasks": [json.dumps({"tasks": [TASK]})],
        "constraints": [json.dumps(CFL)],
        "solution": ["```json\n" + json.dumps(SOLUTION) + "\n```"],
        "answer_check": [json.dumps(YES5)],
        "constraint_check": [json.dumps(YES3)],
    }
    script.update(over)
    return script


@pytest.fixture()
def record(corpus_dir, manifest):
    entry = next(m for m in manifest if m["path"] == NB_PATH)
    return filter_notebook(corpus_dir / entry["local_path"], entry["path"], id=f"{entry['repo']}/{entry['path']}",
                           source=entry).to_dict()


def _client(url: str, **kw) -> ChatClient:
    return ChatClient(LLMConfig(base_url=url, model="fixture", api_key="k", backoff=0.01, **kw), sleep=lambda s: None)


def test_full_extraction_of_a_real_notebook(corpus_dir, record):
    llm = ScriptedLLM(good_script())
    with scripted_server(llm) as server:
        client = _client(server.url, price_prompt_per_mtok=1.0, price_completion_per_mtok=2.0)
        out = extract_notebook(client, record, corpus_dir)
    assert out["status"] == "ok" and out["quality"]["score"] == 4
    (task,) = out["tasks"]
    assert task["status"] == "ok" and task["label"] == "@r_squared[0.9314]"
    assert task["file_names"] == ["synth_temp.csv"] and len(task["steps"]) == 3
    assert task["split"] == "complete_low_randomness" and task["randomness"] == "low"
    assert task["label_in_outputs"] is True  # 0.9314 ≈ the notebook's printed 0.9313996...
    assert out["usage"]["calls"] == 7 and out["usage"]["prompt_tokens"] == 700
    usage = client.usage()
    assert usage.calls == 7 and usage.completion_tokens == 70 and usage.cost == pytest.approx(0.00084)
    first = llm.log[0]["body"]
    assert first["model"] == "fixture" and "synth_temp" in first["messages"][1]["content"]


def test_malformed_json_is_retried_with_the_problem(corpus_dir, record):
    llm = ScriptedLLM(good_script(quality=["Sure! I'd give it a 4.", json.dumps({"score": 9}),
                                           json.dumps({"score": 4, "reason": "ok"})]))
    with scripted_server(llm) as server:
        out = extract_notebook(_client(server.url), record, corpus_dir)
    assert out["status"] == "ok" and llm.calls("quality") == 3
    third = llm.log[2]["body"]["messages"]
    assert third[-1]["role"] == "user" and "integer from 1 to 5" in third[-1]["content"]
    assert third[-2] == {"role": "assistant", "content": json.dumps({"score": 9})}
    assert out["usage"]["attempts"] == 9 and out["usage"]["calls"] == 7


def test_a_stage_failing_three_times_drops_the_input_with_its_reason(corpus_dir, record):
    llm = ScriptedLLM(good_script(tasks=["not json at all", "{\"tasks\": 3}", "[]"]))
    with scripted_server(llm) as server:
        out = extract_notebook(_client(server.url), record, corpus_dir)
    assert (out["status"], out["reason"], out["stage"]) == ("dropped", "tasks_unusable", "tasks")
    assert llm.calls("tasks") == 3 and llm.calls("constraints") == 0


@pytest.mark.parametrize("label,problem", [
    ("@a[1] @b[2] @c[3] @d[4] @e[5] @f[6]", "at most 5"),
    ("@long[" + "x" * 160 + "]", "at most 150"),
    ("0.93", "no @name[value]"),
])
def test_bad_labels_are_rejected(corpus_dir, record, label, problem):
    bad = json.dumps(dict(CFL, label=label, format="@a[v] @b[v] @c[v] @d[v] @e[v] @f[v] @long[v]"))
    llm = ScriptedLLM(good_script(constraints=[bad]))
    with scripted_server(llm) as server:
        out = extract_notebook(_client(server.url), record, corpus_dir)
    assert out["status"] == "dropped" and out["tasks"][0]["reason"] == "constraints_unusable"
    assert llm.calls("constraints") == 3
    assert problem in llm.log[-1]["body"]["messages"][-1]["content"]


def test_quality_and_model_gates(corpus_dir, record):
    llm = ScriptedLLM(good_script(quality=[json.dumps({"score": 2, "reason": "thin"})]))
    with scripted_server(llm) as server:
        assert extract_notebook(_client(server.url), record, corpus_dir)["reason"] == "low_quality"
    llm = ScriptedLLM(good_script(models=[json.dumps({"models": ["Random Forest", "LSTM"]})]))
    with scripted_server(llm) as server:
        out = extract_notebook(_client(server.url), record, corpus_dir)
    assert out["reason"] == "non_classical_model" and out["models"] == ["Random Forest", "LSTM"]
    no = dict(YES5, checks=dict(YES5["checks"], no_leak="no"))
    llm = ScriptedLLM(good_script(answer_check=[json.dumps(no)]))
    with scripted_server(llm) as server:
        out = extract_notebook(_client(server.url), record, corpus_dir)
    assert out["status"] == "dropped" and out["tasks"][0]["reason"] == "answer_check_failed"


def test_http_errors_are_retried_then_surface_as_llm_error(corpus_dir, record, tmp_path):
    llm = ScriptedLLM(good_script(quality=[(500, {"error": "boom"}), (429, {"error": "slow"}, {"Retry-After": "0"}),
                                           json.dumps({"score": 4, "reason": "ok"})]))
    with scripted_server(llm) as server:
        client = _client(server.url)
        assert extract_notebook(client, record, corpus_dir)["status"] == "ok"
        assert client.usage().retries == 2
    llm = ScriptedLLM(good_script(quality=[(503, {"error": "down"})]))
    with scripted_server(llm) as server:
        client = _client(server.url, max_retries=2)
        report = run_extract([record], corpus_dir, tmp_path, client, ExtractConfig(concurrency=1))
        assert report.notebooks == {"llm_error": 1} and llm.calls("quality") == 3
    assert list(read_jsonl(tmp_path / "extract.jsonl")) == []  # nothing written: a rerun retries it
    llm = ScriptedLLM({"unknown": [(400, {"error": "bad request"})]})
    with scripted_server(llm) as server:
        with pytest.raises(LLMError, match="HTTP 400"):
            _client(server.url).chat([{"role": "user", "content": "x"}])
        assert llm.calls("unknown") == 1  # a 4xx other than 429 is not retried


def test_run_extract_is_concurrent_and_resumable(corpus_dir, manifest, tmp_path):
    records = []
    for entry in manifest:
        if entry["expected"] == "keep" and "packtws" in entry["local_path"]:
            records.append(filter_notebook(corpus_dir / entry["local_path"], entry["path"],
                                           id=f"{entry['repo']}/{entry['path']}", source=entry).to_dict())
    assert len(records) == 3
    llm = ScriptedLLM(good_script())
    with scripted_server(llm) as server:
        client = _client(server.url)
        report = run_extract(records[:2], corpus_dir, tmp_path, client, ExtractConfig(concurrency=2))
        assert report.processed == 2 and report.notebooks == {"ok": 2}
        again = run_extract(records, corpus_dir, tmp_path, client, ExtractConfig(concurrency=2))
    assert again.processed == 1 and again.skipped == 2
    assert again.tasks == {"ok": 3} and again.splits == {"complete_low_randomness": 3}
    assert len(list(read_jsonl(tmp_path / "extract.jsonl"))) == 3
    assert llm.calls("quality") == 3


def test_helpers():
    assert parse_json_reply('Here: ```json\n{"a": 1}\n``` done') == {"a": 1}
    assert parse_json_reply('noise {"a": {"b": 2}} trailing') == {"a": {"b": 2}}
    with pytest.raises(ReplyError):
        parse_json_reply("[1, 2]")
    assert randomness_level("df.mean()") == "low"
    assert randomness_level("train_test_split(X, y)") == "high"
    assert randomness_level("train_test_split(X, y, random_state=0)") == "low"
    assert is_classical("RandomForestClassifier") and is_classical("statsmodels OLS") and is_classical("SVC")
    assert not is_classical("LSTM") and not is_classical("BERT fine-tuning")


def test_llm_config_from_env():
    config = LLMConfig.from_env({"NBQA_LLM_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_MODEL": "m"})
    assert config.model == "m" and config.api_key is None
    with pytest.raises(ValueError, match="NBQA_LLM_BASE_URL"):
        LLMConfig.from_env({})
    with pytest.raises(ValueError, match="timeout"):
        LLMConfig(base_url="http://x", model="m", timeout=0)
