"""verify (real sandbox), export (NbQA + ShareGPT) and stats on a task extracted from a real notebook."""

from __future__ import annotations

import json

import pytest

from nbqa_pipeline.export import (
    ConversationError,
    ExportConfig,
    OverLength,
    approx_tokens,
    normalise_conversation,
    run_export,
    sharegpt_samples,
)
from nbqa_pipeline.extract import ExtractConfig, run_extract
from nbqa_pipeline.filters import filter_notebook
from nbqa_pipeline.jsonl import read_jsonl
from nbqa_pipeline.llm_client import ChatClient, LLMConfig
from nbqa_pipeline.stats import collect_stats, write_report
from nbqa_pipeline.verify import rewrite_paths, run_verify, value_in_text
from tests.nbqa.llm_server import ScriptedLLM, scripted_server
from tests.nbqa.test_nbqa_extract import NB_PATH, SOLUTION, good_script


def _sandbox_or_skip():
    try:
        from sandbox import Sandbox, SandboxConfig, StartupError
    except ImportError as exc:
        pytest.skip(f"sandbox package not available: {exc}")
    try:
        sb = Sandbox(SandboxConfig())
        sb.open_root().close()
    except StartupError as exc:
        pytest.skip(f"sandbox cannot start here: {exc}")
    return sb


@pytest.fixture(scope="module")
def extracted(corpus_dir, manifest, tmp_path_factory):
    """extract.jsonl for Exercise_3_04 (right label) and Activity_3_02 (a wrong label), via the fixture LLM."""
    out = tmp_path_factory.mktemp("extract")
    records = []
    for entry in manifest:
        if entry["path"] in (NB_PATH, "Chapter03/Activity3.02/Activity_3_02.ipynb"):
            records.append(filter_notebook(corpus_dir / entry["local_path"], entry["path"],
                                           id=f"{entry['repo']}/{entry['path']}", source=entry).to_dict())
    wrong = dict(SOLUTION, steps=[dict(s) for s in SOLUTION["steps"]])
    wrong["steps"][0]["python_code"] = "import pandas as pd\ndf = pd.read_csv('../Datasets/austin_weather.csv')"
    wrong["steps"][2]["python_code"] = "print('r squared = ', 0.5)"
    for record in records:
        script = good_script() if record["path"] == NB_PATH else good_script(solution=[json.dumps(wrong)])
        with scripted_server(ScriptedLLM(script)) as server:
            client = ChatClient(LLMConfig(base_url=server.url, model="m"), sleep=lambda s: None)
            run_extract([record], corpus_dir, out, client, ExtractConfig(concurrency=1))
    return out


def test_verify_reproduces_a_real_label(corpus_dir, extracted, tmp_path):
    sandbox = _sandbox_or_skip()
    report = run_verify(extracted / "extract.jsonl", corpus_dir, tmp_path, sandbox_factory=lambda: sandbox)
    results = {r["id"].split("#")[0].rsplit("/", 1)[-1]: r for r in read_jsonl(tmp_path / "verify.jsonl")}
    good, bad = results["Exercise_3_04.ipynb"], results["Activity_3_02.ipynb"]
    assert good["status"] == "ran" and good["reproduced"] is True, good
    assert good["step_status"] == ["ok", "ok", "ok"]
    assert bad["status"] == "ran" and bad["reproduced"] is False and bad["found"] == {"r_squared": False}
    assert report.outcomes == {"reproduced": 1, "not_reproduced": 1} and report.reproduced_share == 0.5
    again = run_verify(extracted / "extract.jsonl", corpus_dir, tmp_path, sandbox_factory=lambda: sandbox)
    assert again.processed == 0 and again.skipped == 2


def test_export_and_stats(corpus_dir, extracted, tmp_path):
    verify = tmp_path / "verify.jsonl"
    ids = [t["task_id"] for r in read_jsonl(extracted / "extract.jsonl") for t in r["tasks"]]
    verify.write_text("\n".join(json.dumps({"id": i, "status": "ran", "reproduced": "3_04" in i}) for i in ids))
    out = tmp_path / "export"
    report = run_export(extracted / "extract.jsonl", out, root=corpus_dir, verify_file=verify)
    assert report.nbqa_records == 2 and report.sft_samples == 2 and report.sft_dropped == {}
    record = next(r for r in read_jsonl(out / "nbqa.jsonl") if r["ipynb_name"] == NB_PATH)
    for key in ("task", "file_names", "answer", "concepts", "difficulty", "constraints", "format", "label",
                "solution", "github_repo", "ipynb_name", "data_files"):
        assert key in record, key
    assert record["github_repo"] == "https://github.com/PacktWorkshops/The-Supervised-Learning-Workshop"
    assert record["data_files"] == ["Chapter03/Datasets/synth_temp.csv"] and record["verified"] is True
    assert (out / record["data_dir"] / "synth_temp.csv").is_file()
    from jupiter.task import task_from_nbqa

    task = task_from_nbqa(record, [out / record["data_dir"]])
    assert task.label == "@r_squared[0.9314]" and task.files[0].is_file()
    sample = next(s for s in read_jsonl(out / "sft_sharegpt.jsonl") if s["source"]["ipynb_name"] == NB_PATH)
    roles = [t["from"] for t in sample["conversations"]]
    assert roles == ["human", "gpt"] * 4 and sample["system"]
    assert "Formatted answer" in sample["conversations"][-1]["value"]
    assert sample["source"]["notebook"].endswith(NB_PATH) and sample["num_tokens"] > 50
    info = json.loads((out / "dataset_info.json").read_text())
    assert info["nbqa_sft"]["formatting"] == "sharegpt"
    stats = collect_stats(extract_file=extracted / "extract.jsonl", nbqa_file=out / "nbqa.jsonl", verify_file=verify)
    assert stats.concepts == {"Machine Learning": 2, "Time Series Analysis": 2}
    assert stats.verified == {"reproduced": 1, "not_reproduced": 1}
    # Activity 3.02 never printed 0.9314: the deterministic flag catches the invented label
    assert stats.label_in_outputs == {"True": 1, "False": 1}
    md = write_report(stats, tmp_path / "report")
    text = md.read_text()
    assert "Tasks per concept" in text and "50.0%" in text
    assert (tmp_path / "report" / "concepts.png").stat().st_size > 1000


def test_over_length_samples_are_dropped_cut_or_split_at_turn_boundaries():
    steps = [{"thought": f"step {i}", "python_code": f"x{i} = df.iloc[{i}]\nprint(x{i})", "code_output": "7 " * 300}
             for i in range(3)]
    record = {"id": "t", "task": "How many rows?", "constraints": "", "format": "@n[value]", "label": "@n[3]",
              "file_names": ["a.csv"], "notebook_id": "r/n.ipynb", "solution": steps}
    (full,), outcome, tokens, _ = sharegpt_samples(record, approx_tokens, ExportConfig())
    assert outcome == "ok" and len(full["conversations"]) == 8 and full["num_tokens"] == tokens
    limit = tokens - 200
    assert sharegpt_samples(record, approx_tokens, ExportConfig(max_tokens=limit))[:2] == ([], "over_length")
    (cut,), outcome, _, _ = sharegpt_samples(record, approx_tokens, ExportConfig(max_tokens=limit,
                                                                               over_length=OverLength.PREFIX))
    assert outcome == "prefix" and [t["from"] for t in cut["conversations"]] == ["human", "gpt"] * 3
    assert cut["truncated_at_turn"] == 6 and cut["num_tokens"] <= limit
    parts, outcome, _, _ = sharegpt_samples(record, approx_tokens, ExportConfig(max_tokens=limit,
                                                                              over_length=OverLength.SPLIT))
    assert outcome == "split" and len(parts) == 2 and [p["part"] for p in parts] == [1, 2]
    for part in parts:
        roles = [t["from"] for t in part["conversations"]]
        assert roles[0] == "human" and roles[-1] == "gpt" and all(a != b for a, b in zip(roles, roles[1:]))
        assert part["num_tokens"] <= limit and part["source"]["task_id"] == "t"
    opener = parts[1]["conversations"][0]["value"]
    assert opener.startswith(full["conversations"][0]["value"]) and "Steps already run" in opener
    assert "x0 = df.iloc[0]" in opener and "Formatted answer" in parts[1]["conversations"][-1]["value"]
    tiny = ExportConfig(max_tokens=tokens // 20, over_length=OverLength.SPLIT)
    assert sharegpt_samples(record, approx_tokens, tiny)[:2] == ([], "over_length")


def test_conversation_alternation_is_enforced():
    system, turns, merges = normalise_conversation([
        {"role": "system", "content": "s"}, {"role": "user", "content": "a"}, {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"}, {"role": "assistant", "content": "d"}])
    assert system == "s" and merges == 2
    assert turns == [{"from": "human", "value": "a\n\nb"}, {"from": "gpt", "value": "c\n\nd"}]
    with pytest.raises(ConversationError, match="start"):
        normalise_conversation([{"role": "assistant", "content": "x"}])
    with pytest.raises(ConversationError, match="end"):
        normalise_conversation([{"role": "user", "content": "x"}])


def test_value_matching_and_path_rewrite():
    assert value_in_text("0.9314", "r squared =  0.9313996496373635")
    assert not value_in_text("0.5", "r squared =  0.9313996496373635")
    assert value_in_text("12", "count: 12\n") and not value_in_text("12", "count: 13")
    assert value_in_text("Monday", "busiest day is monday")
    assert value_in_text("1.5e-3", "p = 0.0015")
    code = "pd.read_csv('../Datasets/synth_temp.csv')\nopen(\"data/x.csv\")\nname = 'synth_temp.csv'"
    assert rewrite_paths(code, ["synth_temp.csv", "x.csv"]) == (
        "pd.read_csv('synth_temp.csv')\nopen(\"x.csv\")\nname = 'synth_temp.csv'")
