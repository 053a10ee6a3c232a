"""``jupiter.client`` and ``jupiter solve --server`` against a real ``jupiter serve`` (replay policy, loopback).

The server runs as a subprocess on a free port with its own SQLite file and is stopped by PID (its process
group). The load benchmark script runs on tiny settings and must print its keys.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
import requests
from serve_helpers import TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK, Server

from benchmarks.perf.serve_load import MemorySampler
from jupiter.client import Client, ClientError, Event, JobStatus, ServerUnreachable, WaitTimeout, mime_type, parse_sse
from jupiter.serve.timing import server_ms
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-for-tests"
ANSWER = "@mean_fare[34.65]"


@pytest.fixture(scope="module")
def server(start_module_server) -> Server:
    return start_module_server("--llm", f"replay:{TITANIC_REPLAY}")


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def solved(client: Client) -> dict:
    """The bundled example solved once through the client (submit + wait)."""
    return client.solve(TITANIC_TASK, settings={"seed": 0}, timeout=120)


# ------------------------------------------------------------------------------------------ SSE parsing
def test_parse_sse_decodes_json_events_split_across_chunks() -> None:
    stream = (b': keep-alive\n\nevent: node\ndata: {"tag": "0",\ndata:  "depth": 0}\n\n'
              b'event: done\nid: 7\ndata: {"status": "done"}\n\ndata: plain text\n\n')
    chunks = [stream[i:i + 5] for i in range(0, len(stream), 5)]  # events arrive in pieces
    assert list(parse_sse(chunks)) == [Event("node", {"tag": "0", "depth": 0}),
                                       Event("done", {"status": "done"}, "7"), Event("message", {"text": "plain text"})]


# ------------------------------------------------------------------------------------------ the client
def test_solve_returns_the_finished_job_with_its_result(solved: dict) -> None:
    assert solved["status"] == JobStatus.DONE.value
    assert solved["task_id"] == "dabench-0-titanic-mean-fare"
    assert solved["result"]["answer"] == ANSWER
    assert solved["progress"]["nodes"] >= 2 and solved["progress"]["answers"] >= 1
    assert solved["error"] is None


def test_events_of_a_finished_job_replay_every_node_then_done(client: Client, solved: dict) -> None:
    events = list(client.events(solved["id"]))
    nodes = [e for e in events if e.type == "node"]
    assert events[-1].type == "done" and events[-1].data["status"] == "done"
    assert events[-1].data["answer"] == ANSWER
    assert len(nodes) == solved["progress"]["nodes"]
    assert nodes[0].data["parent"] is None and nodes[0].data["depth"] == 0
    tags = {n.data["tag"] for n in nodes}
    assert all(n.data["parent"] in tags for n in nodes[1:])  # every parent came before its child
    assert any(n.data["answer"] == ANSWER for n in nodes)
    for key in ("tag", "parent", "depth", "status", "terminal", "value", "visits", "answer", "thought", "code",
                "observation"):
        assert key in nodes[1].data


def test_download_writes_each_output(client: Client, solved: dict, tmp_path: Path) -> None:
    tree = client.download(solved["id"], "tree.json", tmp_path)
    assert tree == tmp_path / "tree.json"
    records = json.loads(tree.read_text())  # the paper's layout: one record per node
    assert len(records) == solved["progress"]["nodes"] and records[0]["tag"] == "0"
    notebook = nbformat.read(str(client.download(solved["id"], "solution.ipynb", tmp_path / "nb.ipynb")), 4)
    nbformat.validate(notebook)
    assert any("mean" in cell.source for cell in notebook.cells if cell.cell_type == "code")
    page = client.download(solved["id"], "tree.html", tmp_path / "sub" / "t.html").read_text()
    assert "<svg" in page
    with pytest.raises(ClientError, match="tree.json"):
        client.download(solved["id"], "notes.txt", tmp_path)


def test_status_list_and_live_events_of_a_new_job(client: Client) -> None:
    job_id = client.submit(str(TITANIC_TASK), [TITANIC_DATA], {"iterations": 3, "seed": 1})
    first = client.status(job_id)
    assert first["id"] == job_id and first["status"] in {s.value for s in JobStatus}
    assert first["settings"]["iterations"] == 3
    events = list(client.events(job_id))  # from queued (a status event first) or running to done
    kinds = [e.type for e in events]
    assert kinds[-1] == "done" and kinds.count("done") == 1
    if "status" in kinds:  # subscribed before the end: the live stream also carries the iterations
        assert "iteration" in kinds
    assert next(e for e in events if e.type == "node").data["parent"] is None
    job = client.wait(job_id, poll=0.1, timeout=60)
    assert job["status"] == "done" and job["progress"]["iterations"] <= 3
    assert job_id in [j["id"] for j in client.list(limit=50)]
    assert job_id in [j["id"] for j in client.list(status="done")]


def test_a_task_dict_with_explicit_files_is_accepted(client: Client) -> None:
    record = json.loads(TITANIC_TASK.read_text())
    record["id"] = "from-a-dict"
    job = client.solve(record, [TITANIC_DATA], {"iterations": 2}, poll=0.1, timeout=60)
    assert job["task_id"] == "from-a-dict" and job["status"] == "done"


def test_cancel_ends_a_job(client: Client) -> None:
    job_id = client.submit(TITANIC_TASK, settings={"iterations": 500, "seed": 2})
    job = client.cancel(job_id)
    assert job["id"] == job_id
    final = client.wait(job_id, poll=0.1, timeout=60)
    # cancelled while queued or running; a replay tree can also run out of moves first
    assert final["status"] in ("cancelled", "done")
    assert final["status"] == "cancelled" or job["status"] == "done"


def test_server_errors_name_the_status_and_the_servers_text(client: Client) -> None:
    with pytest.raises(ClientError) as missing:
        client.status("0" * 32)
    assert missing.value.status == 404 and "404" in str(missing.value)
    with pytest.raises(ClientError) as refused:
        client.submit({"question": "What is the mean?", "files": ["nowhere.csv"]}, [])
    assert refused.value.status == 400 and "nowhere.csv" in str(refused.value)
    with pytest.raises(ClientError) as bad_setting:
        client.submit(TITANIC_TASK, settings={"iterations": "many"})
    assert bad_setting.value.status == 400 and "iterations" in str(bad_setting.value)


def test_client_side_checks_name_the_problem(client: Client, tmp_path: Path) -> None:
    with pytest.raises(ClientError, match="unknown key.*colour"):
        client.submit(TITANIC_TASK, settings={"colour": "red"})
    with pytest.raises(ClientError, match="task file not found"):
        client.submit(tmp_path / "none.json")
    with pytest.raises(ClientError, match="missing.csv: not found"):
        client.submit(TITANIC_TASK, [tmp_path / "missing.csv"])
    with pytest.raises(ClientError, match="http://"):
        Client("127.0.0.1:8700")


def test_wait_timeout_leaves_the_job_running(client: Client) -> None:
    job_id = client.submit(TITANIC_TASK, settings={"iterations": 500, "seed": 3})
    try:
        with pytest.raises(WaitTimeout, match=job_id):
            client.wait(job_id, poll=0.05, timeout=0.01)
    finally:
        client.cancel(job_id)


def test_connection_refused_is_one_clear_line() -> None:
    port = free_port()
    with pytest.raises(ServerUnreachable) as exc:
        Client(f"http://127.0.0.1:{port}", timeout=5).status("0" * 32)
    message = str(exc.value)
    assert "\n" not in message and f"127.0.0.1:{port}" in message and "connection refused" in message


def test_a_token_server_needs_the_token(start_server, tmp_path: Path) -> None:
    server = start_server("--llm", f"replay:{TITANIC_REPLAY}", token=TOKEN)
    with pytest.raises(ClientError) as refused:
        Client(server.url).list()
    assert refused.value.status == 401
    with Client(server.url, token=TOKEN) as client:
        job = client.solve(TITANIC_TASK, settings={"iterations": 2}, poll=0.1, timeout=60)
        assert job["status"] == "done"
        assert list(client.events(job["id"]))[-1].type == "done"
        client.download(job["id"], "tree.json", tmp_path)


# ------------------------------------------------------------------------------------------ the CLI
def test_jupiter_solve_server_writes_the_local_outputs(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", str(TITANIC_TASK), "--server", server.url,
                           "--out", str(out), "--iterations", "5", "--no-progress"],
                          capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == ANSWER
    for name in ("result.json", "tree.json", "solution.ipynb", "tree.html"):
        assert (out / name).is_file(), name
    result = json.loads((out / "result.json").read_text())
    assert result["answer"] == ANSWER and result["server"] == server.url and result["job_id"]


def test_solve_flags_become_server_settings() -> None:
    from jupiter.cli import build_parser
    from jupiter.commands.solve_remote import remote_settings

    args = build_parser(only="solve").parse_args(
        ["solve", str(TITANIC_TASK), "--server", "http://127.0.0.1:8700", "--iterations", "4", "--c-puct", "0.5",
         "--seed", "3"])
    settings = remote_settings(args)
    assert settings["iterations"] == 4 and settings["c_puct"] == 0.5 and settings["seed"] == 3
    assert "expansions" not in settings and "max_tokens" not in settings  # unset: the server's profile decides
    assert set(settings) <= set(__import__("jupiter.client").client.SETTINGS_KEYS)


def test_jupiter_solve_server_refuses_local_only_flags_and_a_dead_server(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", str(TITANIC_TASK), "--server",
                           "http://127.0.0.1:9", "--llm", "replay:x.json"],
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 2 and "--llm" in proc.stderr
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", str(TITANIC_TASK), "--server",
                           f"http://127.0.0.1:{port}", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "connection refused" in proc.stderr


def test_jupiter_solve_server_checks_out_before_sending_the_job(tmp_path: Path) -> None:
    """A bad --out fails at once (exit 2, one line naming --out), before the server is contacted: the port
    here is closed, so a check made after submitting would report the connection instead."""
    port = free_port()
    taken = tmp_path / "a-file"
    taken.write_text("x")
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "result.json").write_text(json.dumps({"answer": "@x[1]"}))
    for out in (taken, finished):
        proc = subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", str(TITANIC_TASK), "--server",
                               f"http://127.0.0.1:{port}", "--out", str(out), "--no-progress"],
                              capture_output=True, text=True, timeout=60, cwd=str(ROOT))
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and "--out" in proc.stderr, proc.stderr
        assert "refused" not in proc.stderr and "Traceback" not in proc.stderr
    assert taken.read_text() == "x" and json.loads((finished / "result.json").read_text())["answer"] == "@x[1]"


# ------------------------------------------------------------------------------------------ the benchmark
def _serve_load(*args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "perf" / "serve_load.py"), "--json", *args],
                          capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_serve_load_script_prints_its_keys() -> None:
    result = _serve_load("--tasks", "6", "--clients", "3", "--settle", "0")
    load = result["load"]
    for key in ("accepted", "done", "failed", "submit_ms", "status_ms", "trees_per_s", "peak_rss_mb"):
        assert key in load, key
    assert load["accepted"] == load["done"] == 6 and load["failed"] == 0 and load["api_done"] == 6
    assert load["submit_ms"]["n"] == 6 and load["status_ms"]["p99"] is not None and load["peak_rss_mb"] > 0
    # the server's own part of each latency (Server-Timing) is reported beside the client's, and is smaller
    assert load["server_submit_ms"]["n"] == 6 and load["server_status_ms"]["n"] == load["status_ms"]["n"]
    assert load["server_submit_ms"]["p50"] <= load["submit_ms"]["p50"]
    assert result["driver"] == "thread"
    # the batch's memory is sampled as the server's is, and both report what the sampling cost
    batch = result["batch"]
    assert batch["done"] == 6 and batch["peak_rss_mb"] > 0 and batch["peak_pss_mb"] > 0
    assert load["memory_sampler_cpu_s"] >= 0 and batch["memory_sampler_cpu_s"] >= 0
    assert result["served_over_batch"] > 0
    # each run says how fast the machine was around it (a shared VM's speed moves every latency)
    for run in (load, batch):
        probe = run["machine"]["cpu_probe_ms"]
        assert len(probe) == 2 and all(ms > 0 for ms in probe)
        assert run["machine"]["steal_s"] is None or run["machine"]["steal_s"] >= 0
    assert set(result["targets"]) >= {"all_done", "server_submit_p99_lt_100ms", "server_status_p99_lt_100ms",
                                      "throughput_ge_0_8x_batch"}


def test_every_reply_reaches_on_reply_with_the_servers_time(server: Server) -> None:
    """serve_load reads the server's own time of each request (Server-Timing) through ``on_reply``."""
    replies: list[requests.Response] = []
    with Client(server.url, timeout=30, on_reply=replies.append) as client:
        job_id = client.submit(dict(json.loads(TITANIC_TASK.read_text(encoding="utf-8")), id="hook-1"),
                               sorted(TITANIC_DATA.parent.iterdir()), {"seed": 0})
        assert client.status(job_id)["task_id"] == "hook-1"
        with pytest.raises(ClientError):
            client.status("0" * 32)
    assert [(r.request.method, r.status_code) for r in replies] == [("POST", 202), ("GET", 200), ("GET", 404)]
    assert all(server_ms(r.headers.get("server-timing")) is not None for r in replies[:2])


def test_a_data_file_with_a_non_ascii_name_arrives_under_that_name(client: Client, tmp_path: Path) -> None:
    """The server refuses a task whose named files were not uploaded under those names (see the 400 above), so
    an accepted job with a name in UTF-8 and a space proves the multipart header carried it intact."""
    table = tmp_path / "données été.csv"
    table.write_text("a,b\n1,2\n", encoding="utf-8")
    record = json.loads(TITANIC_TASK.read_text(encoding="utf-8"))
    record.update(id="accents", files=[*record["files"], table.name])
    job = client.solve(record, [*sorted(TITANIC_DATA.parent.iterdir()), table], settings={"seed": 0}, timeout=120)
    assert job["status"] == "done" and job["result"]["answer"] == ANSWER, job


def test_memory_sampler_counts_the_descendants_of_the_process_it_watches() -> None:
    """A shell whose grandchild holds 80 MB: the sampled peak of the shell's tree includes them."""
    holder = ("import time; block = bytearray(80 * 2**20); block[::4096] = b'x' * len(block[::4096]); "
              "print('ready', flush=True); time.sleep(60)")
    shell = subprocess.Popen(["bash", "-c", f'{sys.executable} -c "{holder}"; true'], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert shell.stdout is not None and shell.stdout.readline().strip() == "ready"
        sampler = MemorySampler(lambda: shell.pid, rss_every=0.05, pss_every=0.05)
        sampler.start()
        time.sleep(0.5)
        memory = sampler.stop()
        assert not sampler.is_alive()
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(timeout=10)
    assert memory["peak_rss_mb"] >= 80 and memory["peak_pss_mb"] >= 80
    assert memory["memory_sampler_cpu_s"] >= 0


@pytest.mark.slow
def test_serve_load_kill_restart_loses_nothing_and_reruns_nothing() -> None:
    result = _serve_load("--tasks", "6", "--clients", "3", "--kill-restart", "--no-batch", "--settle", "0")
    restart = result["kill_restart"]
    assert restart["db_done"] == 6 and restart["db_rows"] == 6 and restart["done"] == 6
    assert restart["lost"] == [] and restart["rerun_after_done"] == [] and restart["done_before_kill"] >= 3
    assert restart["orphans_after_kill"] == 0
    assert result["targets"]["restart_all_done_none_lost_none_rerun"] is True


def test_an_upload_is_typed_by_its_name() -> None:
    assert mime_type("titanic.csv") == "text/csv" and mime_type("SALES.JSON") == "application/json"
    assert mime_type("table.unknown-ext") == mime_type("no_extension") == "application/octet-stream"


def test_a_local_server_is_reached_directly_whatever_proxy_the_environment_names(
        server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A proxy in the environment (and no NO_PROXY) would carry requests for 127.0.0.1 to the proxy: a client
    of a local server goes to it directly; one of a remote server still honours the environment."""
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, dead_proxy)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    local = server.url.replace("127.0.0.1", "localhost")
    for url in (server.url, local):
        with Client(url, timeout=10) as direct:
            assert direct.health()["status"] == "ok"
    assert Client("http://jupiter.example.org:8700").proxy == dead_proxy
    assert Client("http://[::1]:8700").proxy is None and Client(server.url).proxy is None
