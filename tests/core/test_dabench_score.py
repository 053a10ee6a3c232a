"""`jupiter score dabench` must equal the official InfiAgent-DABench scorer on any input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from jupiter.answers import score_dabench
from jupiter.cli import main
from jupiter.task import read_jsonl


def official_scores(labels, responses):
    """An independent re-statement of the official script's rules (written for this test).

    Per label: the first response with that id and a truthy response text; a missing name compares as
    None; metrics rounded to 4 decimals over the questions that had a response.
    """
    rows = []
    for label in labels:
        truth = {a[0]: a[1] for a in label["common_answers"]}
        match = None
        for r in responses:
            if "id" in r and r["response"] and r["id"] == label["id"]:
                match = r
                break
        if match is None:
            continue
        found = re.findall(r"@(\w+)\[(.*?)\]", match["response"])
        pred = dict(zip([f[0] for f in found], [f[1] for f in found]))
        verdicts = {}
        for name, ref in truth.items():
            got = pred.get(name)
            ok = got == ref
            if not ok:
                try:
                    ok = abs(float(got) - float(ref)) < 1e-6
                except Exception:
                    ok = False
            verdicts[name] = ok
        rows.append(verdicts)
    if not rows:
        return 0, 0, 0
    abq = round(sum(all(v.values()) for v in rows) / len(rows), 4)
    subs = sum(len(v) for v in rows)
    uasq = round(sum(sum(v.values()) for v in rows) / subs, 4) if subs else 0
    pasq = round(sum(sum(v.values()) * (1 / len(v) if v else 0) for v in rows) / len(rows), 4)
    return abq, pasq, uasq


def test_labels_fed_back_score_one_everywhere(dabench_dir: Path):
    labels = read_jsonl(dabench_dir / "da-dev-labels.jsonl")
    questions = read_jsonl(dabench_dir / "da-dev-questions.jsonl")
    assert len(labels) == 257
    responses = [
        {"id": label["id"], "response": " ".join(f"@{n}[{v}]" for n, v in label["common_answers"]) or "x"}
        for label in labels
    ]
    score = score_dabench(responses, labels, questions)
    assert (score.abq, score.pasq, score.uasq) == (1.0, 1.0, 1.0)
    assert (score.abq_strict, score.pasq_strict, score.uasq_strict) == (1.0, 1.0, 1.0)
    assert score.n == score.n_labels == 257
    assert set(score.by_level) == {"easy", "medium", "hard"}
    assert all(v == 1.0 for v in score.by_concept.values())


value_text = st.sampled_from(["1", "1.0", "2", "0.5", "abc", "", "nan", "1e-7", "[1, 2]", "x y"])
name = st.sampled_from(["a", "b", "mean", "c_1"])
label_st = st.lists(st.tuples(name, value_text), min_size=1, max_size=3)


@st.composite
def scoring_input(draw):
    ids = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6, unique=True))
    labels = [{"id": i, "common_answers": [list(p) for p in draw(label_st)]} for i in ids]
    responses = []
    for _ in range(draw(st.integers(0, 8))):
        rid = draw(st.one_of(st.sampled_from(ids), st.integers(0, 9), st.just(str(ids[0]))))
        parts = draw(st.lists(st.tuples(name, value_text), max_size=4))
        text = draw(st.sampled_from(["", "Answer: "])) + " ".join(f"@{n}[{v}]" for n, v in parts)
        responses.append({"id": rid, "response": text})
    return labels, responses


@settings(max_examples=300, deadline=None)
@given(scoring_input())
def test_equals_official_scorer_on_random_inputs(data):
    labels, responses = data
    score = score_dabench(responses, labels)
    assert (score.abq, score.pasq, score.uasq) == official_scores(labels, responses)


def test_tricky_responses_get_the_official_verdicts():
    labels = [
        {"id": 1, "common_answers": [["mean", "34.65"]]},
        {"id": 2, "common_answers": [["a", "1"], ["b", "x"]]},
        {"id": 3, "common_answers": [["a", ""]]},
        {"id": 4, "common_answers": [["a", "2"]]},
        {"id": 5, "common_answers": [["a", "2"]]},
    ]
    responses = [
        {"id": 1, "response": "@mean[34.650]"},  # numeric equality
        {"id": 2, "response": "@a[1.0] @b[X] @b[x]"},  # last wins for a repeated name
        {"id": 3, "response": "@a[]"},  # empty label matched by empty answer
        {"id": 4, "response": ""},  # empty response drops out officially
        {"id": 5, "response": "@a[3]"},
        {"id": 5, "response": "@a[2]"},  # only the first response for an id counts
    ]
    score = score_dabench(responses, labels)
    assert score.n == 4
    assert score.abq == 0.75
    assert score.abq_strict == 3 / 5
    assert score.correct == {"1": True, "2": True, "3": True, "4": False, "5": False}


def _write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_prints_metrics_json(tmp_path, dabench_dir, capsys):
    labels = read_jsonl(dabench_dir / "da-dev-labels.jsonl")[:10]
    responses = [{"id": label["id"], "response": "@x[1]"} for label in labels[:5]]
    responses[0]["response"] = " ".join(f"@{n}[{v}]" for n, v in labels[0]["common_answers"])
    rpath = _write_jsonl(tmp_path / "r.jsonl", responses)
    lpath = _write_jsonl(tmp_path / "l.jsonl", labels)
    assert main(["score", "dabench", str(rpath), "--labels", str(lpath)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["abq"] == 0.2 and out["n"] == 5 and out["n_labels"] == 10
    assert out["abq_strict"] == 0.1
    assert set(out) >= {"abq", "pasq", "uasq", "abq_strict", "pasq_strict", "uasq_strict", "n", "n_labels"}


def test_cli_bad_labels_exit_2(tmp_path):
    rpath = _write_jsonl(tmp_path / "r.jsonl", [{"id": 1, "response": "@a[1]"}])
    bad = tmp_path / "l.jsonl"
    bad.write_text('{"id": 1}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "jupiter.cli", "score", "dabench", str(rpath), "--labels", str(bad)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert "common_answers" in proc.stderr and "l.jsonl:1" in proc.stderr
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n")
    proc = subprocess.run(
        [sys.executable, "-m", "jupiter.cli", "score", "dabench", str(broken), "--labels", str(bad)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2 and "broken.jsonl:1: not valid JSON" in proc.stderr
