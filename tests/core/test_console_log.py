"""``jupiter solve`` and ``jupiter bench`` show the project's own lines; what other programs print goes to
``OUT/jupiter.log``.

Real processes: the command runs in a subprocess with the replay policy and the fork sandbox. A stand-in
third-party library (``noisylib``, written to a temporary folder and imported before the CLI) makes the noise
a real model load makes — a print, a FutureWarning, a log warning, a write below Python, a child process
writing to stderr, a tqdm bar — when the policy is loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "jupiter" / "examples" / "titanic_mean_fare.json"
REPLAY = ROOT / "jupiter" / "examples" / "titanic_mean_fare.replay.json"

NOISY_LIBRARY = '''
import atexit, logging, os, subprocess, sys, warnings

import jupiter.llm
import jupiter.llm.spec
from tqdm import tqdm

_load = jupiter.llm.spec.load_policy


def load_policy(spec, *args, **kwargs):
    print("noisylib: tcmalloc is not in LD_PRELOAD")
    warnings.warn("noisylib: this argument is deprecated", FutureWarning)
    logging.getLogger("noisylib").warning("noisylib: NUMA node 0 has 2 CPUs")
    engine = logging.getLogger("noisylib.engine")  # a handler of its own on sys.stderr, as vLLM's logger has
    engine.propagate = False
    if not engine.handlers:
        engine.addHandler(logging.StreamHandler())
    engine.warning("noisylib: its own handler's hint")
    os.write(2, b"noisylib: written below Python\\n")
    subprocess.run(["sh", "-c", "echo noisylib: a child process >&2"], check=True)
    for _ in tqdm(range(3), desc="noisylib converting"):
        pass
    kept = sys.stdout  # kept for an exit hook, as Ray's colorama keeps it
    atexit.register(lambda: kept.isatty() or kept.flush())
    if os.environ.get("NOISYLIB_FAIL"):
        logging.getLogger("noisylib").error("noisylib: the engine died")
        engine.error("noisylib: its own handler's error")
        os.write(2, b"noisylib: the engine's last words\\n")
        raise RuntimeError("noisylib: engine core failed")
    return _load(spec, *args, **kwargs)


jupiter.llm.load_policy = jupiter.llm.spec.load_policy = load_policy
'''

NOISE = ("tcmalloc", "deprecated", "NUMA", "own handler's hint", "below Python", "a child process",
         "noisylib converting")


def solve(tmp_path: Path, *flags: str, verbose: bool = False, fail: bool = False) -> subprocess.CompletedProcess:
    return jupiter(tmp_path, "solve", str(EXAMPLE), "--llm", f"replay:{REPLAY}", "--iterations", "4",
                   "--expansions", "2", *flags, verbose=verbose, fail=fail)


def jupiter(tmp_path: Path, *argv: str, verbose: bool = False, fail: bool = False) -> subprocess.CompletedProcess:
    """``jupiter ARGV`` in a subprocess with ``noisylib`` imported first."""
    (tmp_path / "noisylib.py").write_text(NOISY_LIBRARY)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env["TMPDIR"] = str(tmp_path)  # where the log waits until the run folder exists
    env.pop("NOISYLIB_FAIL", None)
    if fail:
        env["NOISYLIB_FAIL"] = "1"
    code = "import sys, noisylib\nfrom jupiter.cli import main\nsys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, *(["-v"] if verbose else []), *argv]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)


def test_the_console_shows_our_lines_and_the_run_folder_keeps_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = solve(tmp_path, "--out", str(out))
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert not [word for word in NOISE if word in console], console
    assert done.stdout.strip() == json.loads((out / "result.json").read_text())["answer"]
    assert "llm: replay" in done.stderr and f"wrote {out}" in done.stderr  # the project's own lines
    assert "\nsandbox: " in done.stderr and "guarantees hold" in done.stderr  # the isolation, named as the model
    assert "4/4" in done.stderr  # its progress bar stays on the console
    assert "closed file" not in done.stderr  # a stream a library kept still works at exit
    log = (out / "jupiter.log").read_text()
    assert all(word in log for word in NOISE), log


def test_the_default_run_folder_gets_the_log_too(tmp_path: Path) -> None:
    done = solve(tmp_path)
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert (run / "result.json").is_file() and "tcmalloc" in (run / "jupiter.log").read_text()


def test_verbose_shows_everything_on_the_console(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = solve(tmp_path, "--out", str(out), verbose=True)
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert all(word in console for word in NOISE), console
    assert not (out / "jupiter.log").exists()


def test_a_failure_shows_what_the_other_programs_printed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = solve(tmp_path, "--out", str(out), fail=True)
    assert done.returncode != 0
    assert "noisylib: the engine died" in done.stderr  # an error record reaches the console as it happens
    assert "noisylib: its own handler's error" in done.stderr  # also through a library's own handler
    assert "RuntimeError: noisylib: engine core failed" in done.stderr  # and the exception itself
    assert "noisylib: the engine's last words" in done.stderr  # the log's tail: nothing below Python is lost
    assert "jupiter.log" in done.stderr or "jupiter-" in done.stderr  # and where the whole log is



def test_a_benchmark_run_keeps_its_console_to_the_table_and_its_log_in_the_run_folder(tmp_path: Path,
                                                                                      dabench_dir: Path) -> None:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({"default": ["Thought: I know it.\nFormatted answer: @answer[1]"]}))
    out = tmp_path / "run"
    argv = ["bench", "dabench", "--data", str(dabench_dir), "--llm", f"replay:{replay}", "--limit", "2",
            "--iterations", "2", "--expansions", "1", "--out", str(out)]
    done = jupiter(tmp_path, *argv)
    assert done.returncode == 0, done.stderr
    console = done.stdout + done.stderr
    assert not [word for word in NOISE if word in console], console
    assert "ran 2 task(s)" in done.stdout and "2/2" in done.stderr  # its table and its progress bar
    assert all(word in (out / "jupiter.log").read_text() for word in NOISE)

    again = jupiter(tmp_path, *argv)  # a resumed run appends to the same log
    assert again.returncode == 0, again.stderr
    assert "skipped 2 already done" in again.stdout
    assert (out / "jupiter.log").read_text().count("tcmalloc") == 2


def test_a_router_kept_after_the_capture_answers_isatty_when_its_stream_is_closed(tmp_path: Path) -> None:
    import io

    from jupiter import console_log

    stream = io.StringIO()
    saved = sys.stdout
    sys.stdout = stream
    try:
        with console_log.capture(tmp_path):
            kept = sys.stdout  # what a library that wraps stdout at import holds on to
    finally:
        sys.stdout = saved
    assert kept is not stream and kept.isatty() is False
    stream.close()
    assert kept.isatty() is False
