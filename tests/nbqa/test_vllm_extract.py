"""Extraction against a real vLLM OpenAI-compatible server on CPU with the bundled tiny model (slow).

The tiny base model rarely writes the JSON we ask for, so the notebook usually ends as ``*_unusable``; what
this checks is the real wire protocol: chat requests accepted, replies parsed, tokens counted, three
attempts made, and no infrastructure error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from nbqa_pipeline.extract import ExtractConfig, extract_notebook
from nbqa_pipeline.filters import filter_notebook
from nbqa_pipeline.llm_client import ChatClient, LLMConfig
from tests.ports import free_port

pytestmark = pytest.mark.slow

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'assistant' %}<start_of_turn>model\n"
    "{% else %}<start_of_turn>user\n{% endif %}{{ m['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory):
    pytest.importorskip("vllm")
    from jupiter.default_model import ModelError, ensure_default_model

    try:
        folder = ensure_default_model()
    except ModelError as exc:
        pytest.skip(str(exc))
    tmp = tmp_path_factory.mktemp("vllm")
    (tmp / "chat.jinja").write_text(TEMPLATE)
    port = free_port()
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND="0-1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    log = (tmp / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder), "--host", "127.0.0.1",
         "--port", str(port), "--dtype", "bfloat16", "--max-model-len", "4096", "--kv-cache-memory-bytes",
         str(512 * 2**20), "--served-model-name", "tiny", "--enforce-eager",
         "--chat-template", str(tmp / "chat.jinja")],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail("vLLM server exited: " + (tmp / "server.log").read_text()[-2000:])
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("vLLM server not healthy after 300 s")
            time.sleep(2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


def test_extract_against_real_vllm(vllm_url, corpus_dir, manifest):
    entry = next(m for m in manifest if m["path"] == "Chapter03/Exercise3.04/Exercise_3_04.ipynb")
    record = filter_notebook(corpus_dir / entry["local_path"], entry["path"], id="x", source=entry).to_dict()
    client = ChatClient(LLMConfig(base_url=vllm_url, model="tiny", max_tokens=48, timeout=300))
    out = extract_notebook(client, record, corpus_dir, ExtractConfig(max_markdown_chars=1500))
    assert out["status"] in {"ok", "dropped"}
    usage = client.usage()
    assert usage.calls >= 1 and usage.failed_calls == 0 and usage.prompt_tokens > 100
    assert out["usage"]["attempts"] >= 1
    if out["status"] == "dropped" and out["reason"].endswith("_unusable"):
        assert out["usage"]["attempts"] >= 3
