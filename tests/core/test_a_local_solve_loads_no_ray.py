"""A local ``jupiter solve`` loads no Ray module, not even Ray's run record (``search.ray_*``): Ray is a batch
backend, and a one-task solve should neither pay its import nor depend on it being installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PROBE = """
import json, sys
from jupiter.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "ray": sorted(m for m in sys.modules
                                              if m == "ray" or m.startswith(("ray.", "search.ray")))}))
"""


def test_a_local_solve_loads_no_ray_module(tmp_path: Path) -> None:
    task = tmp_path / "task.json"
    task.write_text(json.dumps({"id": "one", "question": "What is 1 + 2?", "format": "@x[value]"}))
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"rules": [
        {"match": "1 + 2", "replies": ["Thought: add\nAction:\n```python\nprint(1 + 2)\n```"]},
        {"match": "Observation", "replies": ["Thought: done\nFormatted answer: @x[3]"]}]}))
    done = subprocess.run([sys.executable, "-c", PROBE, "solve", str(task), "--llm", f"replay:{replay}", "--out",
                           str(tmp_path / "out"), "--iterations", "2", "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"code": 0, "ray": []}, done.stderr[-2000:]
    assert json.loads((tmp_path / "out" / "result.json").read_text())["answer"] == "@x[3]"
