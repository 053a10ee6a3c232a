"""Rules, blacklist matching, dependency extraction and caps on small hand-made notebooks."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from nbqa_pipeline.blacklist import code_mentions, find_in_names, find_in_text
from nbqa_pipeline.deps import ReadKind, extract_dependencies, resolve_path
from nbqa_pipeline.diversity import DiversityConfig, apply_diversity
from nbqa_pipeline.filters import FilterConfig, Reason, filter_notebook
from nbqa_pipeline.notebook import InvalidCause, NotebookError, load_notebook, parse_notebook


def _write_nb(path: Path, cells: list[tuple[str, str, int | None]], outputs=None) -> Path:
    nb = nbformat.v4.new_notebook()
    for kind, source, *rest in cells:
        count = rest[0] if rest else None
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            cell = nbformat.v4.new_code_cell(source, execution_count=count)
            nb.cells.append(cell)
    for index, outs in (outputs or {}).items():
        nb.cells[index].outputs = [nbformat.from_dict(o) for o in outs]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


BIG_CODE = "\n".join(f"x{i} = {i}" for i in range(45))


def test_dependencies_follow_variables_joins_and_skip_writes(tmp_path):
    nb = _write_nb(tmp_path / "a" / "nb.ipynb", [
        ("code", "%matplotlib inline\nimport os, pandas as pd\nDATA = 'data'\nname = os.path.join(DATA, 'x.csv')", 1),
        ("code", "df = pd.read_csv(name, sep=';', header=None)\ndf.to_csv('out.csv')\n"
                 "other = pd.read_csv('out.csv')", 2),
        ("md", "The table comes from https://example.org/y.xlsx"),
        ("code", "y = pd.read_excel(DATA + '/y.xlsx')  # mirror: https://mirror.example/y.xlsx\n"
                 "for f in files:\n    pd.read_csv(f)\n"
                 "with open('notes.txt') as h: pass\nwith open('log.txt', 'w') as h: pass\n"
                 "import sqlite3\ncon = sqlite3.connect('db.sqlite')\narr = np.loadtxt(f'{DATA}/m.txt')", 3),
        ("code", "this is ( not python\npd.read_json('broken.json')", 4),
    ])
    deps = extract_dependencies(load_notebook(nb))
    by_path = {r.path: r for r in deps.refs}
    assert list(by_path) == ["data/x.csv", "data/y.xlsx", "notes.txt", "db.sqlite", "data/m.txt", "broken.json"]
    assert dict(by_path["data/x.csv"].options) == {"sep": ";", "header": None}
    assert by_path["db.sqlite"].kind is ReadKind.SQLITE
    assert by_path["data/m.txt"].kind is ReadKind.NUMPY
    assert set(by_path["data/y.xlsx"].source_urls) == {"https://mirror.example/y.xlsx", "https://example.org/y.xlsx"}
    assert deps.unresolved == ("read_csv(f)",)


def test_resolve_path():
    assert resolve_path("../Datasets/a.csv", "Ch03/Ex1/nb.ipynb") == "Ch03/Datasets/a.csv"
    assert resolve_path("a.csv", "nb.ipynb") == "a.csv"
    assert resolve_path("../../a.csv", "x/nb.ipynb") is None
    assert resolve_path("/home/me/a.csv", "nb.ipynb") is None
    assert resolve_path("C:\\data\\a.csv", "nb.ipynb") is None
    assert resolve_path("data\\a.csv", "nb.ipynb") == "data/a.csv"


def test_blacklist_boundaries():
    assert [h.keyword for h in find_in_names(["winequality-white.csv"])] == ["wine"]
    assert [h.keyword for h in find_in_names(["data/Bike_Sharing/hour.csv"])] == ["bike sharing"]
    assert find_in_names(["cocoa_prices.csv", "microsoft.csv", "classes.csv"]) == []
    assert [h.keyword for h in find_in_text(code_mentions(["from sklearn.datasets import load_iris"]))] == ["iris"]
    assert [h.keyword for h in find_in_text(code_mentions(["df = sns.load_dataset('titanic')"]))] == ["titanic"]
    # prose in a plot title or a comment does not name the data set
    assert find_in_text(code_mentions(["plt.title('Heart Disease by age')  # like the iris example"])) == []


def test_rules_on_handmade_notebooks(tmp_path):
    (tmp_path / "d.csv").write_text("a,b\n" + "".join(f"{i},{i}\n" for i in range(30)))
    (tmp_path / "small.csv").write_text("a,b\n1,2\n")
    read = "import pandas as pd\ndf = pd.read_csv('d.csv')\n"
    cases = {
        "ok": ([("code", read + BIG_CODE, 1)], []),
        "order": ([("code", read, 2), ("code", BIG_CODE, 1)], [Reason.OUT_OF_ORDER]),
        "unexec": ([("code", read + BIG_CODE, 1), ("code", "print(1)", None), ("code", "", None)],
                   [Reason.UNEXECUTED_CELLS]),
        "short": ([("code", read, 1)], [Reason.TOO_FEW_CODE_LINES]),
        "torch": ([("code", read + "import torch\n" + BIG_CODE, 1)], [Reason.NEURAL_NETWORK]),
        "gpu": ([("code", read + "model.to('cuda')\n" + BIG_CODE, 1)], [Reason.NEURAL_NETWORK]),
        "rows": ([("code", read + "s = pd.read_csv('small.csv')\n" + BIG_CODE, 1)], [Reason.TOO_FEW_ROWS]),
        "nodata": ([("code", BIG_CODE, 1)], [Reason.NO_DATA_FILES]),
        "missing": ([("code", read + "m = pd.read_csv('gone.csv')\n" + BIG_CODE, 1)], [Reason.MISSING_DATA]),
    }
    for name, (cells, expected) in cases.items():
        nb = _write_nb(tmp_path / f"{name}.ipynb", cells)
        result = filter_notebook(nb, f"{name}.ipynb", id=name)
        assert list(result.reasons) == expected, name
    nb = _write_nb(tmp_path / "err.ipynb", [("code", read + BIG_CODE, 1)],
                   outputs={0: [{"output_type": "error", "ename": "KeyError", "evalue": "'x'", "traceback": []}]})
    assert list(filter_notebook(nb, "err.ipynb", id="err").reasons) == [Reason.ERROR_OUTPUT]


def test_invalid_notebooks_are_rejected_with_reason(tmp_path):
    bad = tmp_path / "bad.ipynb"
    bad.write_text("{not json")
    result = filter_notebook(bad, "bad.ipynb", id="b")
    assert list(result.reasons) == [Reason.INVALID_NOTEBOOK] and result.to_dict()["invalid_cause"] == "not_json"
    weird = {"nbformat": 4, "nbformat_minor": 4, "metadata": {}, "cells": [
        {"cell_type": "code", "source": "1", "outputs": [{"output_type": "weird"}], "execution_count": 1,
         "metadata": {}}]}
    with pytest.raises(NotebookError, match="not valid nbformat") as info:
        parse_notebook(json.dumps(weird), Path("w.ipynb"))
    assert info.value.cause is InvalidCause.INVALID_NBFORMAT
    with pytest.raises(NotebookError, match="bad.ipynb"):
        load_notebook(bad)
    with pytest.raises(NotebookError, match="no 'cells'"):
        parse_notebook(json.dumps({"a": 1}), Path("x.ipynb"))


def test_lfs_pointer_counts_as_missing(tmp_path):
    (tmp_path / "d.csv").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 10\n")
    nb = _write_nb(tmp_path / "n.ipynb", [("code", "import pandas as pd\ndf = pd.read_csv('d.csv')\n" + BIG_CODE, 1)])
    assert list(filter_notebook(nb, "n.ipynb", id="n").reasons) == [Reason.MISSING_DATA]


def test_filter_config_validates():
    with pytest.raises(ValueError, match="min_rows"):
        FilterConfig(min_rows=-1)


def _rec(rid, repo, sha, keep=True, lines=100):
    return {"id": rid, "repo": repo, "verdict": "keep" if keep else "drop", "sft_only": not keep,
            "code_lines": lines, "data_files": [{"sha256": sha}] if sha else []}


def test_diversity_caps():
    records = [
        _rec("r1/a", "r1", "h1", lines=300), _rec("r1/b", "r1", "h2", lines=200), _rec("r1/c", "r1", "h3", lines=100),
        _rec("r1/m1", "r1", None, keep=False), _rec("r1/m2", "r1", None, keep=False, lines=50),
        _rec("r2/a", "r2", "g", lines=90), _rec("r2/b", "r2", "g", lines=80), _rec("r2/c", "r2", "g", lines=70),
        _rec("r3/a", "r3", "g", lines=500),
        {"id": "r4/x", "repo": "r4", "verdict": "drop", "sft_only": False},
    ]
    out = apply_diversity(records, DiversityConfig(max_per_repo_complete=2, max_per_data_group=2))
    assert "r4/x" not in out
    assert out["r1/a"] is None and out["r1/b"] is None and out["r1/c"] is Reason.REPO_CAP
    assert out["r1/m1"] is None and out["r1/m2"] is Reason.REPO_CAP
    # the data group "g" is first seen in r3 (most code): r2's copies are dropped as shared across repositories
    assert out["r3/a"] is None
    assert {out["r2/a"], out["r2/b"], out["r2/c"]} == {Reason.DATA_SHARED_ACROSS_REPOS}
    same_repo = [_rec(f"r5/{i}", "r5", "k", lines=100 - i) for i in range(3)]
    out = apply_diversity(same_repo, DiversityConfig(max_per_repo_complete=5))
    assert [out[f"r5/{i}"] for i in range(3)] == [None, None, Reason.DATA_GROUP_CAP]


def test_safe_normalisation_keeps_fixable_notebooks():
    """A v4.5 notebook without cell ids and a v3 notebook are normalised, not rejected."""
    no_ids = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "source": ["a = 1\n", "a"], "metadata": {}, "outputs": [], "execution_count": 1}]}
    assert parse_notebook(json.dumps(no_ids), Path("x.ipynb")).code_cells[0].source == "a = 1\na"
    v3 = {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [
        {"cell_type": "code", "input": "1+1", "language": "python", "outputs": [], "prompt_number": 4,
         "metadata": {}}]}]}
    (cell,) = parse_notebook(json.dumps(v3), Path("y.ipynb")).code_cells
    assert cell.source == "1+1" and cell.execution_count == 4
