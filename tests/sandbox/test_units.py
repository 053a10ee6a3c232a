"""Pure logic: config validation, observation text, notebook export (no processes)."""
from __future__ import annotations

import nbformat
import pytest

from sandbox import Backend, ConfigError, ExecStatus, Execution, SandboxConfig
from sandbox.notebook import to_notebook
from sandbox.observation import cut_middle, render_observation, strip_ansi


def test_config_defaults_and_enum_coercion():
    cfg = SandboxConfig(backend="kernel")
    assert cfg.backend is Backend.KERNEL
    assert SandboxConfig().timeout_s == 180
    with pytest.raises(ValueError, match="frozen"):
        cfg.timeout_s = 3  # type: ignore[misc]


@pytest.mark.parametrize("field,value", [
    ("backend", "docker"), ("timeout_s", 0), ("max_live_states", 0), ("memory_limit_mb", 10),
    ("max_output_chars", 5), ("isolation", "chroot"), ("run_as_uid", 0), ("kernel_name", ""),
    ("preload_modules", "numpy"), ("max_memory_mb", -1), ("huge_pages", "yes"),
    ("nice", 20), ("nice", -1), ("nice", True),
])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"SandboxConfig.{field}"):
        SandboxConfig(**{field: value})


def test_runtime_env_merges_the_huge_page_tunable(monkeypatch, tmp_path):
    from sandbox.runtime.base import runtime_env
    from sandbox.runtime.workspace import Layout

    layout = Layout(tmp_path, shared_writable=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0")
    env = runtime_env(layout, huge_pages=True)
    assert env["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    assert runtime_env(layout)["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=0"
    assert env["OMP_NUM_THREADS"] == "1"


def test_cut_middle_keeps_head_and_tail_and_says_how_much():
    text = "A" * 5000 + "B" * 5000
    cut = cut_middle(text, 1000)
    assert cut.startswith("A" * 500) and cut.endswith("B" * 500)
    assert "[9000 characters omitted]" in cut
    assert cut_middle("short", 1000) == "short"


def test_observation_joins_streams_results_and_short_error():
    tb = ["\x1b[0;31m---------\x1b[0m", "\x1b[0;31mZeroDivisionError\x1b[0m   Traceback",
          "Cell In[1], line 1\n----> 1 1/0", "\x1b[0;31mZeroDivisionError\x1b[0m: division by zero"]
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "hello\n"},
        {"output_type": "stream", "name": "stderr", "text": "warn\n"},
        {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}, "metadata": {}},
        {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": tb},
    ]
    text = render_observation(outputs, 4000)
    assert "\x1b" not in text
    assert text.startswith("hello\nwarn\n<Figure>")
    assert text.endswith("ZeroDivisionError: division by zero")
    assert "----> 1 1/0" in text
    assert strip_ansi("\x1b[1;32mok\x1b[0m") == "ok"


def test_execution_observation_respects_its_budget():
    ex = Execution(code="print('x'*10000)", status=ExecStatus.OK,
                   outputs=({"output_type": "stream", "name": "stdout", "text": "x" * 10000},), duration_s=0.1,
                   observation_chars=300)
    assert len(ex.observation()) < 400
    assert "characters omitted" in ex.observation()
    assert len(ex.observation(max_chars=20000)) == 10000
    assert ExecStatus.TIMEOUT.is_infrastructure and not ExecStatus.ERROR.is_infrastructure
    assert not ExecStatus.TRUNCATED.is_infrastructure


def test_to_notebook_is_valid_with_every_output_kind():
    ok = Execution(code="1+1", status=ExecStatus.OK, duration_s=0.01, execution_count=1, outputs=(
        {"output_type": "stream", "name": "stdout", "text": "hi\n"},
        {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
         "metadata": {}},
        {"output_type": "execute_result", "execution_count": 1, "data": {"text/plain": "2"}, "metadata": {}},
    ))
    err = Execution(code="1/0", status=ExecStatus.ERROR, duration_s=0.01, execution_count=2, outputs=(
        {"output_type": "error", "ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": ["x"]},
    ))
    nb = to_notebook([("1+1", ok), ("1/0", err), ("x = 3", None)], markdown=[(0, "# Task")])
    nbformat.validate(nb)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "code"]
    assert nb.cells[1].outputs[2].execution_count == 1
    assert nb.cells[2].outputs[0].ename == "ZeroDivisionError"
    assert nb.cells[3].outputs == [] and nb.cells[3].execution_count is None
    text = nbformat.writes(nb)
    assert nbformat.validate(nbformat.reads(text, as_version=4)) is None
