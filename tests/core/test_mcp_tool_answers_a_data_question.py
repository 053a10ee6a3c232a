"""``jupiter mcp``: an agent's MCP client (the official SDK's own, over stdio) finds the tool, calls it on the bundled
task with a replay policy, gets progress notifications while it runs and the answer, the vote and the paths of the
notebook and the tree at the end; a question without files that exist is an error the agent can read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import nbformat
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.conftest import REPO

EXAMPLES = REPO / "jupiter" / "examples"
TASK = json.loads((EXAMPLES / "titanic_mean_fare.json").read_text())


def _server(tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, cwd=str(REPO),
        args=["-m", "jupiter.cli", "mcp", "--llm", f"replay:{EXAMPLES / 'titanic_mean_fare.replay.json'}",
              "--runs", str(tmp_path / "runs"), "--iterations", "6", "--expansions", "2"])


async def _session_calls(tmp_path: Path, calls: list[dict]) -> tuple[list[str], list, list[tuple]]:
    progress: list[tuple] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    results = []
    with (tmp_path / "server.log").open("w") as errlog:
        async with stdio_client(_server(tmp_path), errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = [t.name for t in (await session.list_tools()).tools]
                for arguments in calls:
                    results.append(await session.call_tool("solve_data_question", arguments,
                                                           progress_callback=on_progress))
    return tools, results, progress


def test_an_agent_calls_the_tool_and_gets_the_answer_vote_progress_and_paths(tmp_path: Path) -> None:
    question = {"question": TASK["question"], "files": [str(EXAMPLES / "data" / "test_ave.csv")],
                "constraints": TASK["constraints"], "format": TASK["format"]}
    tools, [result], progress = anyio.run(_session_calls, tmp_path, [question])
    assert tools == ["solve_data_question"]
    assert not result.is_error, result.content
    out = result.structured_content
    assert out["answer"] == "@mean_fare[34.65]" and out["vote_table"]["@mean_fare[34.65]"] >= 1
    notebook = nbformat.read(out["notebook"], as_version=4)
    assert "@mean_fare[34.65]" in notebook.cells[-1].source and any(c.cell_type == "code" for c in notebook.cells)
    assert json.loads(Path(out["tree"]).read_text()) and Path(out["tree_html"]).is_file()
    assert Path(out["folder"]).parent == tmp_path / "runs"
    assert progress and progress[-1][1] == 6 and all(0 <= done <= 6 for done, _, _ in progress)
    assert [done for done, _, _ in progress] == sorted(done for done, _, _ in progress)


def test_a_missing_data_file_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.csv")
    _tools, [result], _progress = anyio.run(_session_calls, tmp_path, [{"question": "Mean?", "files": [missing]}])
    assert result.is_error and "nowhere.csv" in result.content[0].text
