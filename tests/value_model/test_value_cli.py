"""``jupiter value extract|train|score|rank`` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupiter.cli import main
from tests.value_model.test_value_extract import our_tree


def test_extract_writes_samples_and_reports(tmp_path: Path, capsys) -> None:
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps(our_tree()))
    out = tmp_path / "train.jsonl"
    assert main(["value", "extract", str(tree), "-o", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["samples"] == 4 and report["positive"] == 1 and report["negative"] == 1
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {round(line["value"], 3) for line in lines} == {0.0, 1.0, -1.0}


def test_bad_input_exits_2_naming_the_file(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    assert main(["value", "extract", str(bad), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "bad.json" in capsys.readouterr().err
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"messages": [], "value": 3}\n')
    assert main(["value", "train", str(samples), "--out", str(tmp_path / "m")]) == 2
    assert "outside [-1, 1]" in capsys.readouterr().err
    assert main(["value", "score", str(tmp_path / "nomodel"), str(samples)]) == 2
    assert "value_config.json" in capsys.readouterr().err


@pytest.mark.slow
def test_train_then_score_end_to_end(tmp_path: Path, capsys, backbone: str) -> None:
    tree = tmp_path / "tree.json"
    tree.write_text(json.dumps(our_tree()))
    samples = tmp_path / "train.jsonl"
    assert main(["value", "extract", str(tree), "-o", str(samples)]) == 0
    capsys.readouterr()
    model = tmp_path / "model"
    assert main(["value", "train", str(samples), "--base", "default", "--out", str(model), "--epochs", "1",
                 "--batch-size", "2", "--grad-accum", "1", "--max-tokens", "128", "--eval-fraction", "0",
                 "--device", "cpu"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the embedded backbone is kept by name, so the model loads on another machine (no cache path of this one)
    assert json.loads((model / "value_config.json").read_text())["backbone"] == "default"
    assert json.loads((model / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == "default"
    # the tree's 4 paths are one pack (tree packing is the default): one batch, one optimizer step per epoch
    assert report["steps"] == 1
    [epoch] = report["epochs"]
    assert 0 < epoch["tokens_computed"] < epoch["tokens_per_path"] and epoch["seconds"] > 0
    scores = tmp_path / "scores.jsonl"
    assert main(["value", "score", str(model), str(samples), "-o", str(scores), "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert all(-1 <= r["value"] <= 1 and "label" in r for r in rows)
    # the same tree as a DABench run folder, ranked by the real model: its answers and its one live step
    run = tmp_path / "run"
    (run / "trees").mkdir(parents=True)
    (run / "trees" / "t.json").write_text(tree.read_text())
    data = tmp_path / "dabench"
    (data / "tables").mkdir(parents=True)
    (data / "tables" / "t.csv").write_text("x\n1\n")
    (data / "da-dev-questions.jsonl").write_text(json.dumps(
        {"id": "t", "question": "q", "constraints": "", "format": "@mean[value]", "file_name": "t.csv"}) + "\n")
    (data / "da-dev-labels.jsonl").write_text(json.dumps({"id": "t", "common_answers": [["mean", "1"]]}) + "\n")
    capsys.readouterr()
    assert main(["value", "rank", str(model), str(run), "--data", str(data), "--json", "--device", "cpu"]) == 0
    kinds = {k["kind"]: k for k in json.loads(capsys.readouterr().out)["kinds"]}
    assert (kinds["answer"]["nodes"], kinds["answer"]["right"], kinds["answer"]["mixed_trees"]) == (4, 1, 1)
    assert 0.0 <= kinds["answer"]["within_tree_auc"] <= 1.0


def test_config_errors_name_the_flag_not_the_field(tmp_path: Path, capsys) -> None:
    assert main(["value", "train", "--print-config", "--lr", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--lr" in err and "TrainConfig" not in err, err
    tree = tmp_path / "t.json"
    tree.write_text(json.dumps(our_tree()))
    assert main(["value", "extract", str(tree), "-o", str(tmp_path / "s.jsonl"), "--max-wrong", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--max-wrong" in err and "ExtractConfig" not in err, err


def test_an_interrupted_score_keeps_the_rows_it_finished(tmp_path: Path, monkeypatch, capsys) -> None:
    """Scoring goes a chunk at a time (4 batches) and writes each chunk: Ctrl-C in the third loses only it."""
    states = tmp_path / "states.jsonl"
    states.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "tree": str(i)}) + "\n"
                              for i in range(40)))
    calls = []

    class Scorer:
        def evaluate(self, histories):
            calls.append(len(histories))
            if len(calls) == 3:
                raise KeyboardInterrupt
            return [0.5] * len(histories)

    monkeypatch.setattr("value_model.scorer.ValueScorer.load", lambda *args, **kwargs: Scorer())
    scores = tmp_path / "scores.jsonl"
    assert main(["value", "score", str(tmp_path), str(states), "-o", str(scores), "--batch-size", "2"]) == 130
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert calls == [8, 8, 8]
    assert [r["index"] for r in rows] == list(range(16)) and [r["tree"] for r in rows] == [str(i) for i in range(16)]
    assert "rows scored so far are written" in capsys.readouterr().err
