"""``jupiter solve``: outputs on a real run (real sandbox, replay policy from a file) and bad-input exits."""

from __future__ import annotations

import json
import shlex
import shutil
import typing
from pathlib import Path

import nbformat
import pytest
from search_dabench import final, step

from jupiter.cli import build_parser, main

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
    top = result["vote_table"][0]
    assert result["decided_by"] == "vote" and top["answer"] == "@mean_fare[34.65]"
    assert top["count"] == sum(c["multiplicity"] for c in result["candidates"] if c["key"] == top["key"]) >= 2
    assert {"iterations", "nodes", "model_calls", "seconds", "candidates", "value_answer"} <= set(result)
    assert result["value_answer"] is None  # no value model, no value answer
    assert any("no value model" in note for note in result["notes"]) and "profile paper" in result["notes"]
    assert result["config"]["c_puct"] == 0.0 and result["config"]["prior_rule"] == "exp"  # the paper profile
    tree = json.loads((out / "tree.json").read_text())
    assert len(tree) == result["nodes"] and tree[0]["tag"] == "0"
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
    (lambda d, r: ["solve", str(EXAMPLE), "--iterations", "0", "--llm", f"replay:{r}"], "--iterations: must be"),
    (lambda d, r: ["solve", str(EXAMPLE), "--top-p", "2", "--llm", f"replay:{r}"], "--top-p: must be"),
    (lambda d, r: ["solve", str(EXAMPLE), "--llm", "nonsense"], "--llm"),
    (lambda d, r: ["solve", str(EXAMPLE), "--llm", f"replay:{d / 'none.json'}"], "--llm"),
    (lambda d, r: ["solve", str(EXAMPLE), "--value-model", str(d / "nope")], "--value-model"),
    (lambda d, r: ["solve", str(d / "nolabel.json"), "--mode", "collect", "--llm", f"replay:{r}"], "label"),
    (lambda d, r: ["solve", str(d / "nodata.json"), "--llm", f"replay:{r}"], "data file"),
    (lambda d, r: ["solve", str(EXAMPLE), "--setup", str(d / "absent.py"), "--llm", f"replay:{r}"], "--setup"),
    (lambda d, r: ["solve", str(EXAMPLE), "--setup", str(d / "bad.json"), "--llm", f"replay:{r}", "--setup",
                   str(d / "empty.py")], "is empty"),
])
def test_bad_input_exits_2_naming_the_problem(tmp_path, replay, capsys, make_args, message):
    (tmp_path / "bad.json").write_text("{oops")
    record = json.loads(EXAMPLE.read_text())
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    (tmp_path / "nolabel.json").write_text(json.dumps(dict(record, label=None)))
    (tmp_path / "nodata.json").write_text(json.dumps(dict(record, files=["data/absent.csv"])))
    (tmp_path / "empty.py").write_text("  \n")
    code = main(make_args(tmp_path, replay))
    assert code == 2
    assert message in capsys.readouterr().err


def test_setup_file_runs_once_before_the_search(tmp_path, capsys):
    setup = tmp_path / "setup.py"
    setup.write_text("import pandas as pd\ndf = pd.read_csv('test_ave.csv')\nprint('ROWS', len(df))\n")
    script = {"rules": [
        {"match": "Setup output:\nROWS 715",
         "replies": [step("Use the loaded frame.", "print(round(df['Fare'].mean(), 2))")]},
        {"match": "34.65", "replies": [final("@mean_fare[34.65]")]},
    ], "default": ["Thought: lost."]}
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(script))
    out = tmp_path / "run"
    assert main(["solve", str(EXAMPLE), "--setup", str(setup), "--llm", f"replay:{replay}", "--iterations", "3",
                 "--expansions", "1", "--out", str(out), "--no-progress"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["answer"] == "@mean_fare[34.65]"
    notebook = nbformat.read(out / "solution.ipynb", as_version=4)
    assert next(c.source for c in notebook.cells if c.cell_type == "code") == setup.read_text()


class _ScorerStub:
    """Stands in for value_model.ValueScorer (built by another package) to test the CLI's wiring only."""

    loaded_from = None
    options: typing.ClassVar[dict] = {}

    @classmethod
    def load(cls, path, **options):
        cls.loaded_from, cls.options = path, options
        return cls()

    def evaluate(self, histories):
        # prefer paths whose last observation printed the mean
        return [0.9 if "34.65" in h[-1]["content"] else 0.0 for h in histories]


def test_value_model_makes_infer_value_guided(tmp_path, replay, monkeypatch, capsys):
    import types

    module = types.ModuleType("value_model")
    module.ValueScorer = _ScorerStub
    monkeypatch.setitem(__import__("sys").modules, "value_model", module)
    (tmp_path / "vm").mkdir()
    out = tmp_path / "run"
    code = main(["solve", str(EXAMPLE), "--llm", f"replay:{replay}", "--value-model", str(tmp_path / "vm"),
                 "--iterations", "12", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    result = json.loads((out / "result.json").read_text())
    assert result["config"]["c_puct"] == 0.0 and result["decided_by"] == "vote"  # the paper: vote with a VM
    assert result["answer"] == "@mean_fare[34.65]" and result["stats"]["value_calls"] >= 1
    assert result["value_answer"] is not None
    assert any("value-model estimates" in note for note in result["notes"])
    assert _ScorerStub.loaded_from == tmp_path / "vm"
    assert _ScorerStub.options == {"dtype": None}  # the device's dtype unless --value-dtype names one


def test_value_dtype_reaches_the_scorer(tmp_path, replay, monkeypatch, capsys):
    import types

    module = types.ModuleType("value_model")
    module.ValueScorer = _ScorerStub
    monkeypatch.setitem(__import__("sys").modules, "value_model", module)
    (tmp_path / "vm").mkdir()
    code = main(["solve", str(EXAMPLE), "--llm", f"replay:{replay}", "--value-model", str(tmp_path / "vm"),
                 "--value-dtype", "bfloat16", "--iterations", "2", "--out", str(tmp_path / "run"), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert _ScorerStub.options == {"dtype": "bfloat16"}
    with pytest.raises(SystemExit) as exit_info:
        main(["solve", str(EXAMPLE), "--value-dtype", "float16"])
    assert exit_info.value.code == 2 and "--value-dtype" in capsys.readouterr().err


def test_value_model_package_without_scorer_exits_2(tmp_path, monkeypatch, capsys):
    import types

    monkeypatch.setitem(__import__("sys").modules, "value_model", types.ModuleType("value_model"))
    (tmp_path / "vm").mkdir()
    assert main(["solve", str(EXAMPLE), "--value-model", str(tmp_path / "vm")]) == 2
    assert "ValueScorer is not available" in capsys.readouterr().err


def _readme_solve_args(repo: Path) -> list[str]:
    """The arguments of the `jupiter solve` in the README's first command, exactly as written there."""
    for line in (repo / "README.md").read_text(encoding="utf-8").splitlines()[:10]:
        if "jupiter solve" in line:
            return shlex.split(line.split("jupiter solve", 1)[1])
    raise AssertionError("README.md: no `jupiter solve` command in its first lines")


def test_readme_first_command_names_the_bundled_example(repo_dir):
    args = _readme_solve_args(repo_dir)
    assert (repo_dir / args[0]).resolve() == EXAMPLE.resolve()
    assert build_parser().parse_args(["solve", *args]).handler is not None


@pytest.mark.slow
def test_readme_example_on_the_embedded_default_model(tmp_path, capsys, repo_dir):
    """The README's first command (as written there): the bundled example on the default CPU model."""
    out = tmp_path / "run"
    args = _readme_solve_args(repo_dir)
    code = main(["solve", str(repo_dir / args[0]), *args[1:], "--out", str(out), "--no-progress"])
    assert code in (0, 1)  # a 270M model: seed 0 answers right here (README), other machines may sample otherwise
    result = json.loads((out / "result.json").read_text())
    assert result["model_calls"] >= 1 and result["nodes"] >= 2
    nbformat.validate(nbformat.read(str(out / "solution.ipynb"), as_version=4))
