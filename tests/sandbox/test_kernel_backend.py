"""The jupyter_client backend (real ipykernel) and cross-backend comparison with the fork backend."""
from __future__ import annotations

import pytest

from sandbox import Backend, ExecStatus, Sandbox, SandboxConfig

CELLS = [
    "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3], 'b': [4.0, 5.5, 6.25]})\ndf.describe()",
    "print('rows', len(df))\nimport sys\nprint('warn', file=sys.stderr)",
    "from IPython.display import display\ndisplay(df.a.sum())\ndf.b.mean()",
    "x = [i * i for i in range(5)]\nx",
    "df['c'] = df.a * 2\ndf.c.tolist()",
    "undefined_name + 1",
    "import matplotlib.pyplot as plt\nplt.plot(df.a, df.b)\nplt.show()",
    "1 / 0",
    "x[-1];",
]


def _comparable(outputs):
    """What must agree across backends: kinds in order, stream text, text/plain and MIME keys, error names."""
    out = []
    for o in outputs:
        kind = o["output_type"]
        if kind == "stream":
            out.append((kind, o["name"], o["text"]))
        elif kind in ("execute_result", "display_data"):
            plain = o["data"].get("text/plain", "")
            if "image/png" in o["data"]:
                plain = "<figure>"
            out.append((kind, plain, tuple(sorted(o["data"]))))
        else:
            out.append((kind, o["ename"], o["evalue"]))
    return out


@pytest.fixture(scope="module")
def both():
    with Sandbox(SandboxConfig(timeout_s=60)) as fork_box, \
            Sandbox(SandboxConfig(backend="kernel", timeout_s=60)) as kernel_box:
        yield fork_box, kernel_box


def test_same_cells_same_outputs_on_both_backends(both):
    fork_root, kernel_root = (box.open_root() for box in both)
    for cell in CELLS:
        a, b = fork_root.run(cell), kernel_root.run(cell)
        assert a.status == b.status, cell
        assert a.execution_count == b.execution_count, cell
        assert _comparable(a.outputs) == _comparable(b.outputs), cell


def test_kernel_branch_replays_and_is_independent(both):
    _, kernel_box = both
    root = kernel_box.open_root()
    root.run("x = 10\nopen('f.txt', 'w').write('root')")
    child = root.branch()
    assert kernel_box.stats().replays >= 1 and kernel_box.config.backend is Backend.KERNEL
    assert child.run("x").result == "10"
    child.run("x = 1\nopen('g.txt', 'w').write('child')")
    assert root.run("x").result == "10"
    assert root.run("import os; os.path.exists('g.txt')").result == "False"
    assert child.read_file("g.txt") == b"child" and child.read_file("f.txt") == b"root"


def test_kernel_timeout_then_parent_works(both):
    _, kernel_box = both
    root = kernel_box.open_root()
    root.run("y = 2")
    ex = root.branch().run("while True: pass", timeout=2)
    assert ex.status is ExecStatus.TIMEOUT
    assert root.run("print(y)").stdout == "2\n"


def test_kernel_runs_under_the_configured_rlimits():
    config = SandboxConfig(backend="kernel", timeout_s=60, memory_limit_mb=1024, max_file_size_mb=1, cpu_limit_s=600)
    with Sandbox(config) as box:
        root = box.open_root()
        limits = root.run("import resource\n[resource.getrlimit(r)[0] for r in "
                          "(resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_CPU)]")
        assert limits.result == f"[{1024 * 2**20}, {2**20}, 600]"
        assert root.run("b = bytearray(2 * 1024**3)").status is ExecStatus.MEMORY_LIMIT
        too_large = root.run("open('big.bin', 'wb').write(b'x' * (2 * 1024**2))")
        assert too_large.status is ExecStatus.ERROR and "File too large" in too_large.error.evalue
        assert root.run("1 + 1").result == "2"
