"""``jupiter solve``: outputs on a real run (real sandbox, replay policy from a file) and bad-input exits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from jupiter.cli import main

from search_dabench import final, step

EXAMPLES = Path(__file__).resolve().parents[2] / "jupiter" / "examples"
EXAMPLE = EXAMPLES / "titanic_mean_fare.json"
HOSTILE = "</script><script>alert('x')</script><b>bold</b>"


@pytest.fixture()
def replay(tmp_path) -> Path:
    script = json.loads((EXAMPLES / "titanic_mean_fare.replay.json").read_text())
    script["rules"].append({"match": "hostile", "replies": [final("@mean_fare[1]")]})
    script["rules"][0]["replies"].append(step(HOSTILE, "print('hostile')"))
    script["rules"][0]["logprobs"].append(-2.0)
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(script))
    return path


def test_solve_writes_result_tree_notebook_and_page(tmp_path, replay, capsys):
    out = tmp_path / "run"
    code = main(["solve", str(EXAMPLE), "--llm", f"replay:{replay}", "--iterations", "12", "--expansions", "3",
                 "--out", str(out), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.strip() == "@mean_fare[34.65]"
    result = json.loads((out / "result.json").read_text())
    assert result["answer"] == "@mean_fare[34.65]" and result["correct"] is True
    assert result["decided_by"] == "vote" and result["vote_table"][0]["count"] == 2
    assert {"iterations", "nodes", "model_calls", "seconds", "candidates", "value_answer"} <= set(result)
    assert any("without a value model" in note for note in result["notes"])
    assert result["config"]["c_puct"] == 1.25
    tree = json.loads((out / "tree.json").read_text())
    assert len(tree["nodes"]) == result["nodes"]
    notebook = nbformat.read(str(out / "solution.ipynb"), as_version=4)
    nbformat.validate(notebook)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert any("34.65" in o.get("text", "") for o in outputs)
    page = (out / "tree.html").read_text()
    assert "<script>alert" not in page and "<b>bold" not in page  # model text is escaped
    assert "\\u003c/script\\u003e" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # self-contained


def test_default_output_folder_and_react_mode(tmp_path, replay, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["solve", str(EXAMPLE), "--llm", f"replay:{replay}", "--mode", "react", "--no-progress"])
    assert code == 0
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and runs[0].name.startswith("dabench-0-titanic-mean-fare-")
    result = json.loads((runs[0] / "result.json").read_text())
    assert result["config"]["mode"] == "react" and result["config"]["temperature"] == 0.2


@pytest.mark.parametrize("make_args, message", [
    (lambda d, r: ["solve", str(d / "missing.json")], "not found"),
    (lambda d, r: ["solve", str(d / "bad.json")], "not valid JSON"),
    (lambda d, r: ["solve", str(EXAMPLE), "--iterations", "0", "--llm", f"replay:{r}"], "SearchConfig.iterations"),
    (lambda d, r: ["solve", str(EXAMPLE), "--llm", "nonsense"], "--llm"),
    (lambda d, r: ["solve", str(EXAMPLE), "--llm", f"replay:{d / 'none.json'}"], "--llm"),
    (lambda d, r: ["solve", str(EXAMPLE), "--value-model", str(d / "nope")], "--value-model"),
    (lambda d, r: ["solve", str(d / "nolabel.json"), "--mode", "collect", "--llm", f"replay:{r}"], "label"),
    (lambda d, r: ["solve", str(d / "nodata.json"), "--llm", f"replay:{r}"], "data file"),
])
def test_bad_input_exits_2_naming_the_problem(tmp_path, replay, capsys, make_args, message):
    (tmp_path / "bad.json").write_text("{oops")
    record = json.loads(EXAMPLE.read_text())
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    (tmp_path / "nolabel.json").write_text(json.dumps(dict(record, label=None)))
    (tmp_path / "nodata.json").write_text(json.dumps(dict(record, files=["data/absent.csv"])))
    code = main(make_args(tmp_path, replay))
    assert code == 2
    assert message in capsys.readouterr().err
