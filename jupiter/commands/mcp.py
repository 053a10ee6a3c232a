"""``jupiter mcp``: Jupiter as a Model Context Protocol tool server, over stdio.

Why: agents (desktop assistants, IDE agents) hand work to tools over MCP, and a data question with its files is
such work. The server offers one tool, ``solve_data_question(question, files, constraints?, format?)``, which
runs ``jupiter.solve`` (the same local search as ``jupiter solve``: the policy loaded once, a run folder per
question) and returns the answer, the vote table and the paths of the notebook and the tree. While it runs it
sends MCP progress notifications (iterations done of the budget) to a client that asked for them.

It is built on the official ``mcp`` SDK (``mcp.server.mcpserver.MCPServer``). stdout carries the protocol: while
it serves, the SDK points the process's descriptor 1 at stderr, so whatever the search, the model or a cell
prints stays off the wire (and the command does not capture the console into a log as ``solve`` does).

    jupiter mcp --llm default --iterations 8          # then point the agent's MCP config at this command
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import Context  # at the top: the SDK reads the tool's annotations at run time

from jupiter.commands.helpformat import HelpFormatter
from jupiter.commands.search_args import add_search_arguments, add_value_model_argument, settings_from_args

__all__ = ["add_parser", "run", "build_server", "TOOL"]

#: the tool's name, as agents see it
TOOL = "solve_data_question"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("mcp", help="serve data questions as an MCP tool (stdio)", description=__doc__,
                                   formatter_class=HelpFormatter)
    parser.add_argument("--llm", default="default", help="policy spec, as jupiter solve takes it")
    add_value_model_argument(parser)
    parser.add_argument("--runs", type=Path, default=Path("runs"),
                        help="folder that gets one run folder per question (default: runs/)")
    add_search_arguments(parser, ("infer", "react", "vote"))
    parser.set_defaults(handler=run, quiet_console=False)
    return parser


def build_server(llm: str, value_model: Path | None, runs: Path, mode: str = "infer",
                 settings: dict[str, Any] | None = None, seed: int = 0) -> Any:
    """The MCP server with its one tool; ``settings`` are search settings by field name (``jupiter.solve``)."""
    import anyio
    import anyio.from_thread
    import anyio.to_thread
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from jupiter.api import solve
    from jupiter.llm import PolicyError
    from jupiter.task import TaskError
    from search.loaders import LoadError

    server: Any = MCPServer(name="jupiter", instructions=(
        "Answers a data-analysis question about the given data files by tree search over notebook states: "
        "the model writes and runs Python cells, and the answer is the majority over the answers it reached."))
    chosen = dict(settings or {})

    @server.tool(name=TOOL, description=(
        "Answer a data-analysis question about data files (CSV, Excel, ...) by running Python in a notebook. "
        "files: paths of the data files on this machine. constraints: how to compute it (optional). format: how "
        "to write the answer, e.g. '@mean[value]' (optional). Returns the answer, the vote over the answers the "
        "search reached, and the paths of the solution notebook and the search tree."))
    async def solve_data_question(question: str, files: list[str], ctx: Context, constraints: str | None = None,
                                  format: str | None = None) -> dict[str, Any]:
        def report(done: int, total: int) -> None:  # on the search's thread: into the server's event loop
            anyio.from_thread.run(ctx.report_progress, done, total, f"{done} of {total} iterations")

        def work() -> Any:
            return solve(question, files=files, constraints=constraints, format=format, llm=llm,
                         value_model=value_model, out=_fresh_folder(runs), seed=seed, progress=False, mode=mode,
                         on_progress=report, **chosen)

        try:
            result = await anyio.to_thread.run_sync(work)
        except (TaskError, PolicyError, LoadError) as exc:  # the agent's input or the model: say what, for it to read
            raise ToolError(str(exc)) from None
        return {"answer": result.answer, "vote_table": result.vote_table,
                "notebook": str(result.paths["notebook"]), "tree": str(result.paths["tree_json"]),
                "tree_html": str(result.paths["tree_html"]), "folder": str(result.folder),
                "interrupted": result.interrupted}

    return server


def _fresh_folder(runs: Path) -> Path:
    """A new, empty run folder under ``runs`` (``question-<n>``), made here so that two questions asked at once
    never share one."""
    runs.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            (runs / f"question-{n}").mkdir()
            return runs / f"question-{n}"
        except FileExistsError:
            n += 1


def run(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin."""
    settings = settings_from_args(args)
    server = build_server(args.llm, args.value_model, args.runs, mode=args.mode, settings=settings.overrides(),
                          seed=args.seed)
    server.run("stdio")
    return 0
