"""The job API against a real server (uvicorn subprocess, replay policy, real fork sandbox)."""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
import sys

import nbformat
import pytest
import requests
from serve_helpers import REPO, TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK, write_replay

from search.settings import JobSettings


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--llm", f"replay:{TITANIC_REPLAY}", "--max-files", "3", "--max-upload-mb", "0.2",
                               name="api")


def test_a_jobs_solution_notebook_reruns_in_its_output_folder(server):
    """The service's output folder holds the job's inputs beside the notebook, so it re-runs there too."""
    from nbclient import NotebookClient

    from jupiter.serve.jobs import job_paths

    job_id = server.submit(settings={"iterations": 6}).json()["id"]
    assert list(server.events(job_id))[-1][1]["answer"] == "@mean_fare[34.65]"
    output = job_paths(server.data_root, job_id).output
    assert (output / "test_ave.csv").is_file()
    notebook = nbformat.read(str(output / "solution.ipynb"), as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(output)}}).execute()
    printed = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs)
    assert "34.6" in printed


def test_submit_streams_nodes_and_finishes_with_the_right_answer(server):
    response = server.submit(settings={"iterations": 6})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued" and re.fullmatch(r"[0-9a-f]{32}", body["id"])
    job_id = body["id"]
    events = list(server.events(job_id))
    kinds = [k for k, _ in events]
    nodes = [d for k, d in events if k == "node"]
    assert nodes[0]["tag"] == "0" and nodes[0]["parent"] is None
    assert len({n["tag"] for n in nodes}) == len(nodes), "every node is sent once"
    assert {"tag", "parent", "depth", "status", "terminal", "value", "visits", "answer", "thought", "code",
            "observation"} <= set(nodes[1])
    assert "iteration" in kinds and kinds[-1] == "done"
    done = events[-1][1]
    assert done == {"status": "done", "answer": "@mean_fare[34.65]", "error": None}
    assert any("34.65" in (n["observation"] or "") for n in nodes), "a cell really ran on the uploaded file"

    job = server.get(f"/v1/tasks/{job_id}").json()
    assert job["status"] == "done" and job["task_id"] == "dabench-0-titanic-mean-fare"
    assert job["question"].startswith("Calculate the mean fare")
    assert job["result"]["answer"] == "@mean_fare[34.65]" and job["result"]["task_id"] == job["task_id"]
    assert job["settings"]["iterations"] == 6 and job["settings"]["mode"] == "infer"
    assert set(job["settings"]) == set(JobSettings.model_fields)  # every setting, as the search used it
    assert job["progress"]["nodes"] == len(nodes) and job["progress"]["answers"] >= 1
    assert job["created"] <= job["started"] <= job["finished"]

    tree = server.get(f"/v1/tasks/{job_id}/tree.json")
    assert tree.status_code == 200 and len(tree.json()) == len(nodes)
    notebook = server.get(f"/v1/tasks/{job_id}/solution.ipynb")
    assert notebook.status_code == 200 and notebook.json()["nbformat"] == 4
    html = server.get(f"/v1/tasks/{job_id}/tree.html")
    assert html.status_code == 200 and "<svg" in html.text

    # a late client gets every node (root first) and then done
    late = list(server.events(job_id))
    assert [d["tag"] for k, d in late if k == "node"] == [n["tag"] for n in nodes]
    assert late[-1] == ("done", done)

    # with ?resume=1 a client that reconnects names the last node it got and the stream goes on after it;
    # another attempt's ids (the job was re-queued since) get everything
    replayed = list(server.events(job_id, headers={"Last-Event-ID": "1-3"}))  # by default: everything again
    assert len([k for k, _ in replayed if k == "node"]) == len(nodes)
    resumed = list(server.events(job_id, headers={"Last-Event-ID": "1-3"}, params={"resume": "1"}))
    assert [d["tag"] for k, d in resumed if k == "node"] == [n["tag"] for n in nodes[3:]]
    assert resumed[-1] == ("done", done)
    other_run = list(server.events(job_id, headers={"Last-Event-ID": "7-3"}, params={"resume": "1"}))
    assert len([k for k, _ in other_run if k == "node"]) == len(nodes)
    raw = requests.get(server.url + f"/v1/tasks/{job_id}/events", timeout=30).text
    assert raw.startswith("id: 1-1\nevent: node\n")

    listed = server.get("/v1/tasks", params={"status": "done", "limit": 5}).json()["tasks"]
    assert listed[0]["id"] == job_id and "result" not in listed[0]


def test_health_docs_and_unknown_ids(server):
    health = server.get("/healthz").json()
    assert health["status"] == "ok" and health["policy"].startswith("replay:")
    assert {"version", "queued", "running"} <= set(health) and health["driver"] == "thread"
    openapi = server.get("/openapi.json").json()
    settings_field = openapi["paths"]["/v1/tasks"]["post"]["requestBody"]["content"]["multipart/form-data"][
        "schema"]["properties"]["settings"]
    documented = openapi["components"]["schemas"][settings_field["contentSchema"]["$ref"].rsplit("/", 1)[-1]]
    assert set(documented["properties"]) == set(JobSettings.model_fields) and not documented["additionalProperties"]
    assert server.get("/").status_code == 200
    assert "status" in server.get("/v1/tasks", params={"status": "bogus"}).json()["error"]
    assert server.get("/v1/tasks", params={"limit": 0}).status_code == 400
    assert server.get("/v1/tasks", params={"limit": "x"}).status_code == 400
    for path in ("/v1/tasks/0123456789abcdef0123456789abcdef", "/v1/tasks/nope", "/v1/tasks/nope/events",
                 "/v1/tasks/0123456789abcdef0123456789abcdef/tree.json"):
        response = server.get(path)
        assert response.status_code == 404 and "error" in response.json(), path


@pytest.mark.parametrize("name", ["../evil.csv", "a/b.csv", "a\\b.csv", ".hidden", "x..csv", "nul\x00.csv"])
def test_bad_file_names_are_refused(server, name):
    response = server.submit(files=[(name, b"a\n1\n")])
    assert response.status_code == 400, response.text
    assert "file name" in response.json()["error"]


def test_limits_give_clear_errors(server):
    data = TITANIC_DATA.read_bytes()
    cases = [
        (server.submit(files=[(f"f{i}.csv", b"a\n") for i in range(4)]), 400, "too many files"),
        (server.submit(files=[("big.csv", b"x" * 300_000), (TITANIC_DATA.name, data)]), 413, "too large"),
        (server.submit(task="{not json"), 400, "not valid JSON"),
        (server.submit(task={"id": "t", "files": []}), 400, "question"),
        (server.submit(task={"id": "t", "question": "q?", "files": [], "label": "no brackets"}), 400, "label"),
        (server.submit(settings={"iterations": 3, "bogus": 1, "nope": 2}), 400, "bogus, nope"),
        (server.submit(settings={"iterations": "many"}), 400, "settings.iterations"),
        (server.submit(settings={"mode": "dance"}), 400, "settings.mode"),
        (server.submit(settings={"iterations": 0}), 400, "iterations"),
        (server.submit(settings="[1, 2]"), 400, "JSON object"),
        (server.submit(task={"id": "t", "question": "q?", "files": []}, files=[], settings={"mode": "collect"}),
         400, "label"),
        (server.submit(files=[]), 400, "not uploaded: test_ave.csv"),
        (server.submit(files=[("other.csv", b"a\n")]), 400, "test_ave.csv"),
        (server.submit(files=[(TITANIC_DATA.name, data), (TITANIC_DATA.name, data)]), 400, "duplicate"),
    ]
    for response, status, words in cases:
        assert response.status_code == status, (words, response.status_code, response.text)
        assert words in response.json()["error"], (words, response.json())
    no_task = requests.post(server.url + "/v1/tasks", files=[("settings", (None, "{}"))], timeout=30)
    assert no_task.status_code == 400 and "task" in no_task.json()["error"]


def test_a_task_cannot_name_files_outside_its_job(server, tmp_path):
    first = server.submit(settings={"iterations": 1}).json()["id"]
    server.wait(first)
    other = server.data_root / first / "files" / TITANIC_DATA.name
    assert other.is_file()
    for name in (str(other), f"../{first}/files/{TITANIC_DATA.name}", "/etc/passwd", "../task.json"):
        task = dict(json.loads(TITANIC_TASK.read_text()), files=[name])
        response = server.submit(task=task, files=[])
        assert response.status_code == 400, (name, response.text)
        assert "not uploaded" in response.json()["error"]
    second = server.submit(settings={"iterations": 1}).json()["id"]
    server.wait(second)
    assert (server.data_root / first).is_dir() and (server.data_root / second).is_dir()
    assert (server.data_root / first).stat().st_mode & 0o077 == 0, "job folders are private to the server"


def test_metrics_text_parses(server):
    text = server.get("/metrics").text
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) jupiter_\w+ .+", line), line
            continue
        match = re.fullmatch(r'(jupiter_\w+(?:\{\w+="[^"]*"\})?) (\S+)', line)
        assert match, line
        samples[match.group(1)] = float(match.group(2))
    for name in ("jupiter_queue_length", "jupiter_running_trees", "jupiter_nodes_per_second",
                 "jupiter_tokens_per_second", "jupiter_prefix_cache_hit_rate", "jupiter_sandbox_states"):
        assert name in samples, name
    assert samples['jupiter_jobs_total{status="done"}'] >= 1
    assert math.isnan(samples["jupiter_prefix_cache_hit_rate"]), "the replay policy reports no cache"
    assert 'jupiter_failures_total{type="infrastructure"}' in samples
    parser = pytest.importorskip("prometheus_client.parser")
    families = {f.name for f in parser.text_string_to_metric_families(text)}
    assert {"jupiter_queue_length", "jupiter_jobs_total", "jupiter_failures"} <= families


def test_token_is_required_when_set(start_server):
    token = "s3cret-token-for-tests"
    server = start_server("--llm", f"replay:{TITANIC_REPLAY}", token=token, name="auth")
    bare = {"Authorization": ""}
    assert requests.get(server.url + "/v1/tasks", timeout=10).status_code == 401
    assert requests.get(server.url + "/metrics", timeout=10).status_code == 401
    assert requests.get(server.url + "/openapi.json", timeout=10).status_code == 401
    wrong = requests.get(server.url + "/v1/tasks", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401 and "token" in wrong.json()["error"]
    refused = server.submit(headers=bare, settings={"iterations": 2})
    assert refused.status_code == 401
    assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
    assert requests.get(server.url + "/", timeout=10).status_code == 200
    accepted = server.submit(settings={"iterations": 2})
    assert accepted.status_code == 202
    job_id = accepted.json()["id"]
    events = list(server.events(job_id, headers=bare, params={"token": token}))  # EventSource style
    assert events[-1][0] == "done"
    assert requests.get(server.url + f"/v1/tasks/{job_id}/events", timeout=10).status_code == 401


def test_non_loopback_host_needs_a_token(tmp_path):
    cmd = [sys.executable, "-m", "jupiter.cli", "serve", "--llm", f"replay:{TITANIC_REPLAY}", "--host", "0.0.0.0",
           "--db", str(tmp_path / "db.sqlite")]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "token is required" in done.stderr
    assert not (tmp_path / "db.sqlite").exists()
    bad_profile = subprocess.run(cmd[:-4] + ["--profile", "nope", "--db", str(tmp_path / "db.sqlite")], cwd=REPO,
                                 capture_output=True, text=True, timeout=60)
    assert bad_profile.returncode == 2 and "--profile nope" in bad_profile.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = subprocess.run(cmd[:-4] + ["--port", port, "--db", str(tmp_path / "db.sqlite")], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    assert busy.returncode == 2 and "cannot listen" in busy.stderr
    bad_nice = subprocess.run(cmd[:-4] + ["--nice", "25", "--db", str(tmp_path / "db.sqlite")], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
    assert bad_nice.returncode == 2 and "ServeConfig.nice: must be less than or equal to 19, got 25" in bad_nice.stderr


def test_the_sandbox_sees_only_its_own_job(start_server, tmp_path):
    from sandbox.runtime.isolation import bwrap_works

    if not bwrap_works():
        pytest.skip("bubblewrap does not work here: without it the sandbox has no filesystem isolation")
    data_root = tmp_path / "jobs"
    probe = ("Thought: look around.\nAction:\n```python\nimport os\ntry:\n"
             f"    print('SEEN', os.listdir({str(data_root)!r}))\n"
             "except OSError as e:\n    print('DENIED', type(e).__name__)\n"
             "print('HERE', sorted(os.listdir('.')))\n```")
    script = write_replay(tmp_path / "probe.json", [{"match": "Task:", "replies": [probe]}])
    server = start_server("--llm", f"replay:{script}", data_root=data_root, name="probe")
    first = server.submit(settings={"iterations": 1, "expansions": 1}).json()["id"]
    server.wait(first)
    second = server.submit(settings={"iterations": 1, "expansions": 1}).json()["id"]
    server.wait(second)
    nodes = [d for k, d in server.events(second) if k == "node"]
    observation = nodes[1]["observation"]
    assert "DENIED" in observation and "SEEN" not in observation, observation
    assert "test_ave.csv" in observation  # its own file is there


def test_an_nbqa_record_is_accepted_and_solved(server):
    """The NbQA layout (task, file_names, constraints, format, label) is a task like ours."""
    record = {"task": "Calculate the mean fare paid by the passengers.", "file_names": ["test_ave.csv"],
              "constraints": "Round to two decimal places.", "format": "@mean_fare[mean_fare_value]",
              "label": "@mean_fare[34.65]", "concepts": ["Summary Statistics"], "difficulty": "easy"}
    # 8 iterations: at 4 the vote depended on the job's tie-breaks (its tree's random order is seeded with the job
    # id), and in 3 of 8 jobs the replay's early wrong answer was the only one found
    response = server.submit(task=record, settings={"iterations": 8})
    assert response.status_code == 202, response.text
    job = server.wait(response.json()["id"])
    assert job["status"] == "done", job.get("error")
    assert job["question"].startswith("Calculate the mean fare")
    assert job["result"]["answer"] == "@mean_fare[34.65]" and job["result"]["correct"] is True
