"""Error observations show the model where in its own code the error happened, not host internals."""
from __future__ import annotations

from sandbox import ExecStatus, Sandbox, SandboxConfig
from sandbox.observation import short_traceback

ESC = "\x1b[0;31m"


def test_library_frames_shrink_to_package_relative_headers():
    traceback = [
        f"{ESC}---------------------------------------------------------------------------",
        f"{ESC}KeyError{ESC}                                  Traceback (most recent call last)",
        "Cell In[7], line 2\n      1 x = 1\n----> 2 df['missing']",
        "File /root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/pandas/core/frame.py:4330, in "
        "DataFrame.__getitem__(self, key)\n   4329 a\n-> 4330 b",
        "File /usr/lib/python3.11/functools.py:10, in wrapper()\n   9 x\n-> 10 y",
        "File /opt/venv/lib/python3.12/site-packages/pandas/a.py:1, in f()\n-> 1 z",
        "File /opt/venv/lib/python3.12/site-packages/pandas/b.py:2, in g()\n-> 2 w",
        "KeyError: 'missing'",
    ]
    text = short_traceback(traceback)
    assert text.splitlines()[:3] == ["Cell In[7], line 2", "      1 x = 1", "----> 2 df['missing']"]
    assert "... 1 more frame(s) inside libraries ..." in text
    assert "File functools.py:10, in wrapper()" in text and "File pandas/b.py:2, in g()" in text
    assert "/root/" not in text and "site-packages" not in text and "-> 4330 b" not in text
    assert "Traceback (most recent call last)" not in text and "KeyError: 'missing'" not in text


def test_non_cell_tracebacks_keep_their_tail():
    assert short_traceback(["Traceback", "line a", "line b", "Err: x"], max_lines=2) == "line a\nline b"


def test_real_pandas_key_error_points_at_the_cell_line(sb):
    ex = sb.open_root().run("import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf['missing']")
    assert ex.status is ExecStatus.ERROR
    text = ex.observation()
    assert "----> 3 df['missing']" in text and text.rstrip().endswith("KeyError: 'missing'")
    assert "site-packages" not in text and "pandas/core/" in text


def test_zygote_traceback_warm_up_changes_no_observation(sb):
    """The zygote formats a few pandas tracebacks once (so forked states do not re-parse pandas' sources); a state
    must see the same traceback as a runtime that never warmed up, and nothing of the warm-up in its namespace."""
    cells = ("import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf['missing']", "pd.Series([1.0]).meen()",
             "undefined_name_")
    probe = "print(sorted(k for k in globals() if not k.startswith('_')), len(In), repr(_))"
    with Sandbox(SandboxConfig(timeout_s=60, preload_modules=())) as cold_box:
        warm, cold = sb.open_root(), cold_box.open_root()
        assert warm.run(probe).outputs == cold.run(probe).outputs
        for code in cells:
            warm_ex, cold_ex = warm.run(code), cold.run(code)
            assert warm_ex.status is cold_ex.status is ExecStatus.ERROR
            assert warm_ex.error == cold_ex.error
            assert warm_ex.observation() == cold_ex.observation()
