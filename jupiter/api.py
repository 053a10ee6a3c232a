"""``jupiter.solve(question, files=..., data=...)``: one data question searched from Python, for notebooks.

Why a function of its own: in a notebook the task is a question and a few DataFrames, not a task file, and the
answer should show where the work is (the vote, the tree) without leaving the notebook. It runs the same local
search as ``jupiter solve`` (``search.run_search`` in a fresh sandbox, the run folder written by
``search.outputs.write_outputs``) and returns a ``Result`` that Jupiter and VS Code render inline
(``_repr_html_``: the answer, the vote table and the tree viewer of ``tree.html``).

- The policy (and the value model) are loaded once per process and reused by later calls: the embedded model
  takes seconds to load, a notebook asks many questions.
- ``data`` takes a DataFrame (written as ``data.csv``) or a dict of file name -> DataFrame, written into the run
  folder's ``inputs/`` and given to the search like ``files``.
- Progress goes through ``tqdm.auto`` (a widget in a notebook, a bar in a terminal).
- Interrupting the kernel (KeyboardInterrupt) returns the result over what the tree had, marked interrupted.
"""

from __future__ import annotations

import hashlib
import html
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupiter.output_paths import check_run_folder, default_run_dir
from jupiter.task import Task, TaskError

__all__ = ["Result", "solve", "loaded_models"]

_LOCK = threading.Lock()
_POLICIES: dict[str, Any] = {}  # policy spec -> the loaded policy, for the life of the process
_VALUES: dict[str, Any] = {}  # value model folder -> the loaded scorer


@dataclass
class Result:
    """What ``solve`` found: the decided ``answer``, ``correct`` against ``label`` (None without one), the
    ``vote_table`` (answer -> votes), the chosen path as an nbformat ``notebook``, the ``tree``, the run
    ``folder`` and its files (``paths``), and the ``search`` result itself (stats, candidates, config)."""

    answer: str | None
    correct: bool | None
    vote_table: dict[str, int]
    notebook: Any
    tree: Any
    folder: Path
    paths: dict[str, Path]
    search: Any
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        state = ", interrupted" if self.interrupted else ""
        return f"Result(answer={self.answer!r}, correct={self.correct}{state}, folder='{self.folder}')"

    def _repr_html_(self) -> str:
        """The answer, the vote table and the tree viewer (``tree.html``, in a sandboxed frame) for a notebook."""
        answer = html.escape(self.answer) if self.answer is not None else "<i>no answer found</i>"
        verdict = {True: " ✓ right", False: " ✗ wrong", None: ""}[self.correct]
        rows = "".join(f"<tr><td><code>{html.escape(k)}</code></td><td>{v}</td></tr>"
                       for k, v in sorted(self.vote_table.items(), key=lambda kv: -kv[1]))
        page = self.paths["tree_html"].read_text(encoding="utf-8")
        frame = (f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:520px;border:1px solid '
                 '#ddd" sandbox="allow-scripts"></iframe>')
        stopped = " (interrupted: the decision is over what the tree had)" if self.interrupted else ""
        return (f'<div class="jupiter-result"><p><b>Answer:</b> <code>{answer}</code>{verdict}{stopped}</p>'
                f"<table><tr><th>answer</th><th>votes</th></tr>{rows}</table>"
                f"<p>{len(self.tree.nodes)} nodes; files in <code>{html.escape(str(self.folder))}</code></p>"
                f"{frame}</div>")


def loaded_models() -> dict[str, list[str]]:
    """The policies and value models this process holds (loaded by earlier ``solve`` calls)."""
    with _LOCK:
        return {"llm": sorted(_POLICIES), "value_model": sorted(_VALUES)}


def _policy(spec: Any) -> Any:
    from jupiter.llm import load_policy

    if not isinstance(spec, str):  # a policy object of the caller's (search.PolicyLike)
        return spec
    with _LOCK:
        if spec not in _POLICIES:
            _POLICIES[spec] = load_policy(spec)
        return _POLICIES[spec]


def _value(spec: str | Path | None) -> Any:
    from search.loaders import load_value, value_model_path

    path = value_model_path(spec)
    if path is None:
        return None
    key = str(path.resolve())
    with _LOCK:
        if key not in _VALUES:
            _VALUES[key] = load_value(path)
        return _VALUES[key]


def _write_data(data: Any, folder: Path) -> list[Path]:
    """``data`` (a DataFrame, or file name -> DataFrame) as CSV files in ``folder``; their paths."""
    if data is None:
        return []
    frames = data if isinstance(data, Mapping) else {"data.csv": data}
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, frame in frames.items():
        if Path(name).name != name or not name:
            raise TaskError(f"data: {name!r} is not a plain file name")
        if not hasattr(frame, "to_csv"):
            raise TaskError(f"data[{name!r}]: a pandas DataFrame is needed, got {type(frame).__name__}")
        target = folder / (name if "." in name else f"{name}.csv")
        frame.to_csv(target, index=False)
        written.append(target)
    return written


def solve(question: str, files: Sequence[str | Path] = (), data: Any = None, constraints: str | None = None,
          format: str | None = None, label: str | None = None, llm: Any = "default",
          value_model: str | Path | None = None, out: str | Path | None = None, seed: int = 0,
          progress: bool = True, mode: str = "infer", on_progress: Callable[[int, int], None] | None = None,
          **settings: Any) -> Result:
    """Search ``question`` over ``files`` (paths) and ``data`` (DataFrames) and return a ``Result``.

    ``llm``: a policy spec as ``jupiter solve --llm`` takes (``default``: the embedded model), or a policy object
    (``search.PolicyLike``); ``value_model``:
    ``default``, ``none`` or a folder; ``settings``: search settings by field name (``iterations=8``,
    ``expansions=2``, ``max_tokens=128``, ...; ``search.SearchConfig``). The run folder (``out``, default
    ``runs/<task>-<time>``) gets the files ``jupiter solve`` writes. ``on_progress(done, total)`` is called after
    every step with the iterations done and the budget (the MCP tool reports them as progress).
    """
    from search import config_for_mode
    from search.config import fit_context

    if not question or not question.strip():
        raise TaskError("solve: the question is empty")
    task_id = "notebook-" + hashlib.sha1(question.encode("utf-8")).hexdigest()[:10]
    folder = default_run_dir(out, task_id)
    if out is None:  # two calls in one second: a folder each
        base, n = folder, 1
        while folder.exists():
            n += 1
            folder = base.with_name(f"{base.name}-{n}")
    check_run_folder(folder, force=out is not None, option="out")
    inputs = [Path(f) for f in files] + _write_data(data, folder / "inputs")
    task = Task(id=task_id, question=question.strip(), constraints=constraints or "", format=format or "",
                files=tuple(inputs), label=label).with_files_checked()
    value = _value(value_model)
    policy = _policy(llm)
    from jupiter.llm.base import BasePolicy

    # a caller's own policy object has no declared window; jupiter.llm's policies declare theirs
    window = policy.context_window if isinstance(policy, BasePolicy) else None
    config = fit_context(config_for_mode(mode, **settings), window)
    return _search(task, policy, llm, value, config, folder, seed, progress, on_progress)


def _search(task: Task, policy: Any, llm: Any, value: Any, config: Any, folder: Path, seed: int,
            progress: bool, on_progress: Callable[[int, int], None] | None = None) -> Result:
    import nbformat
    from tqdm.auto import tqdm

    from sandbox import Sandbox
    from search.loaders import sandbox_config
    from search.outputs import NOTEBOOK_FILE, RESULT_FILE, TREE_FILE, TREE_VIEW_FILE, write_outputs
    from search.resumable import search_trees

    bar = tqdm(total=config.iterations, desc=f"solve {task.id}", unit="it", disable=not progress)

    def step(done: Any) -> None:
        bar.n = done.iterations
        bar.refresh()
        if on_progress is not None:
            on_progress(min(done.iterations, config.iterations), config.iterations)

    results: list[Any] = []
    try:
        with Sandbox(sandbox_config(config)) as sandbox:
            try:  # an interrupt between steps: the run layer hands back what the tree had, then raises
                for one in search_trees([task], policy, lambda: sandbox, config, value, seed=seed, on_step=step,
                                        close_sandboxes=False):
                    results.append(one)
            except KeyboardInterrupt:
                if not results:
                    raise
    finally:
        bar.close()
    result = results[-1]
    written = write_outputs(result, folder, {"llm": llm if isinstance(llm, str) else type(llm).__name__})
    if result.interrupted:
        print("jupiter: interrupted; the result is over what the tree had", file=sys.stderr)
    paths = {"folder": folder, "notebook": written.path(NOTEBOOK_FILE), "tree_html": written.path(TREE_VIEW_FILE),
             "tree_json": written.path(TREE_FILE), "result_json": written.path(RESULT_FILE)}
    return Result(answer=result.answer, correct=result.correct, vote_table=result.vote_table,
                  notebook=nbformat.read(str(paths["notebook"]), as_version=4), tree=result.tree, folder=folder,
                  paths=paths, search=result, interrupted=result.interrupted, notes=list(result.notes))
