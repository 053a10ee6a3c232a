"""Running a benchmark's trees on Ray: ``search.ray_driver.solve_tasks_ray`` behind the run loop's interface.

The Ray driver is a blocking call that writes its own tree files and manifest and reports each finished tree
to a callback (``on_outcome``) in the calling process. This adapter runs it on a thread and turns the
callbacks into the stream of ``SearchResult`` objects the benchmark run loop consumes
(``TreeOutcome.to_result``: decided from the returned tree as the local driver decides, with the worker's own
counters).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["ray_solver"]


def ray_solver(llm_spec: str, value_model: str | Path | None, ray_dir: str | Path, **ray_options: Any) -> Any:
    """A solver for ``benchmarks.runner.run_loop`` that runs the trees on Ray (``ray_options`` go to the driver).

    The ``policy`` and ``sandbox_factory`` arguments of the returned function are ignored: the Ray workers
    build their own from ``llm_spec`` (the policy is shared by an actor when it is a local model).
    """

    def solve(tasks: Iterable[Any], policy: Any, sandbox_factory: Any, config: Any, value: Any = None,
              seed: int = 0) -> Iterator[Any]:
        from search.ray_driver import solve_tasks_ray

        events: queue.Queue[tuple[str, Any]] = queue.Queue()
        task_list = list(tasks)

        def work() -> None:
            try:
                solve_tasks_ray(task_list, llm_spec, config, ray_dir, value_model=value_model, seed=seed,
                                progress=False, on_outcome=lambda o: events.put(("outcome", o)), **ray_options)
            except BaseException as exc:  # handed to the consuming thread, which re-raises it
                events.put(("error", exc))
                return
            events.put(("done", None))

        thread = threading.Thread(target=work, name="ray-driver", daemon=True)
        thread.start()
        while True:
            kind, item = events.get()
            if kind == "outcome":
                yield item.to_result(config, value_model is not None)
            elif kind == "error":
                raise item
            else:
                thread.join()
                return

    return solve
