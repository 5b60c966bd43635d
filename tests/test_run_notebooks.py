"""chapter20/scripts/run_notebooks.py (``make run``, ``make notebooks``): one line per notebook,
the failing cell named, subprocess output in the notebook, the kernel's own chatter in a log,
alt text in the HTML."""

from __future__ import annotations

import re

import pytest

from chapter20.scripts import run_notebooks

FIGURE = """import subprocess
import matplotlib.pyplot as plt
from chapter20.core.plotting import new_figure
fig, ax = new_figure("Loss", "step", "loss")
ax.plot([3, 2, 1])
plt.show()
subprocess.run(["echo", "from a child process"], check=True)
# The kernel forwards what its children write from a thread that reads their pipe: give that
# thread a moment before the cell ends, or a busy machine (two test workers) can end the cell
# before the line reaches it.
import time
time.sleep(1.0)"""


@pytest.fixture(scope="module")
def nbformat():
    """nbformat, imported only where it is used: its jsonschema builds a parser at import (3 s
    and more), which every test process would otherwise pay while it collects the tests."""
    import nbformat

    return nbformat


def _notebook(nbformat, path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nbformat.write(nb, path)
    return path


def test_one_line_per_notebook_and_the_failing_cell(nbformat, tmp_path, capsys, monkeypatch):
    import chapter20.core.measure as measure

    monkeypatch.delenv("MPLBACKEND", raising=False)
    # How busy the machine is comes from machine_busy (measured before each notebook): a fixed
    # reading here, so the line is checked to print exactly what was measured.
    monkeypatch.setattr(measure, "machine_busy", lambda seconds=1.0: 0.07)
    # ipykernel does not capture the output of child processes when it runs under pytest.
    monkeypatch.delenv("PYTEST_CURRENT_TEST", raising=False)
    good = _notebook(nbformat, tmp_path / "01_good.ipynb", FIGURE)
    bad = _notebook(
        nbformat, tmp_path / "02_bad.ipynb", "x = 1", "raise ValueError('no such size')", "x"
    )
    out = tmp_path / "out"
    status = run_notebooks.main(["--output-dir", str(out), "--html", str(good), str(bad)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 1
    busy = r"\(busy +7%\)"  # how busy the machine was before the notebook ran
    assert re.fullmatch(rf"01_good +\d+\.\d s  {busy}  ✓", lines[0])
    assert re.match(
        rf"02_bad +\d+\.\d s  {busy}  ✗ cell 1 \(In \[2\]\): ValueError: no such size", lines[1]
    )
    assert "1 of 2 notebooks ran without errors" in lines[2]

    executed = nbformat.read(out / "01_good.ipynb", as_version=4)
    outputs = executed.cells[0].outputs
    assert any("from a child process" in o.get("text", "") for o in outputs)
    image = next(o for o in outputs if "image/png" in o.get("data", {}))
    assert image.metadata["image/png"]["alt"] == "Loss: loss against step."
    assert 'alt="Loss: loss against step."' in (out / "01_good.html").read_text()
    assert "without encryption" not in "\n".join(lines)  # the kernel's warning is in its log
    assert (out / "01_good.kernel.log").is_file()
    assert nbformat.read(out / "02_bad.ipynb", as_version=4).cells[2].execution_count is None


def test_recording_refuses_a_busy_machine_unless_forced(nbformat, tmp_path, capsys, monkeypatch):
    """Committed outputs (--inplace) are recorded on a quiet machine only: above the threshold
    the script waits, then refuses with the reason and exit status 3; --force records. The
    kernel that records runs PyTorch's AVX2 kernels on an x86 CPU, whatever the CPU offers, and
    bf16 attention runs there (on a CPU with AMX, oneDNN must be held to AVX2 too)."""
    import platform

    import chapter20.core.measure as measure

    # Recording sets the variable in this process, for its kernels: set here, then removed, so
    # that monkeypatch takes it away again after the test.
    for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    notebook = _notebook(nbformat, tmp_path / "01_good.ipynb", "print('ok')")
    monkeypatch.setattr(measure, "machine_busy", lambda seconds=1.0: 0.9)
    status = run_notebooks.main(["--inplace", "--wait", "0", str(notebook)])
    out = capsys.readouterr().out
    assert status == 3 and "refusing to record 01_good.ipynb" in out and "90%" in out
    assert run_notebooks.main(["--inplace", "--wait", "0", "--force", str(notebook)]) == 0
    capability = (
        "import torch\nimport torch.nn.functional as F\n"
        "print(torch.backends.cpu.get_cpu_capability())\n"
        "q = torch.randn(1, 2, 64, 32, dtype=torch.bfloat16)\n"
        "print(F.scaled_dot_product_attention(q, q, q).dtype)  # fails with AMX and AVX2 alone"
    )
    _notebook(nbformat, notebook, capability)
    monkeypatch.setattr(measure, "machine_busy", lambda seconds=1.0: 0.05)
    assert run_notebooks.main(["--inplace", "--wait", "0", str(notebook)]) == 0
    printed = nbformat.read(notebook, as_version=4).cells[0].outputs[0]["text"].split()
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    assert printed[0] == "AVX2" if x86 else printed[0] != "AVX2"
    assert printed[1] == "torch.bfloat16"
