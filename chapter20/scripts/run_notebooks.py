"""Execute notebooks top to bottom and print one line per notebook (``make run``, ``make
notebooks``): its name, the seconds it took, and ✓ or the cell that failed.

Each notebook runs in a fresh ``python3`` kernel in the notebook's folder. What the kernel
process itself writes to its terminal (the transport warning, output of subprocesses that bypass
the notebook) goes to ``<name>.kernel.log`` beside the executed notebook, not to the screen.

    python -m chapter20.scripts.run_notebooks --output-dir build/notebooks --html notebooks/*.ipynb
    python -m chapter20.scripts.run_notebooks --inplace notebooks/03_mixed_precision.ipynb

Committed outputs (``--inplace``, what ``make notebooks`` does) are recorded on a quiet machine
only: before each notebook the share of the CPU that other work keeps busy is measured
(``chapter20.core.measure.machine_busy``); above ``--quiet-below`` the script waits up to
``--wait`` seconds for it to drop and then refuses, saying why, unless ``--force``. Every line
says how busy the machine was. They are recorded, and checked by nbval
(``notebooks/conftest.py``), with the kernels :func:`recording_environment` names.
``--record-claims PATH`` writes the owners' claim rows of the run (from ``$CHAPTER20_RESULTS``)
as the committed record that ``chapter20 audit`` and notebook 11 fall back on.

Needs the ``dev`` extra (nbclient, nbconvert). Exit status 1 when any notebook failed, 3 when
the machine was too busy to record.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class NotebookRun:
    """The outcome of executing one notebook."""

    name: str
    seconds: float
    error: str | None  # None: every cell ran; else "cell N: ErrorName: message"
    output: Path
    log: Path

    busy: float = 0.0  # the share of the CPU other work kept busy just before it ran

    def line(self, width: int = 40) -> str:
        """``name  seconds  (busy)  ✓`` or ``... ✗ cell N: ...`` (the log named)."""
        head = f"{self.name:<{width}} {self.seconds:6.1f} s  (busy {self.busy:4.0%})  "
        if self.error is None:
            return head + "✓"
        return head + f"✗ {self.error}  (notebook: {self.output}, kernel log: {self.log})"


def _failed_cell(nb) -> str:
    """The first cell whose outputs hold an error, as ``cell N (In [k]): Name: value``."""
    for index, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error":
                count = cell.get("execution_count")
                label = f"cell {index}" + (f" (In [{count}])" if count else "")
                value = str(out.get("evalue", "")).strip().splitlines()
                return f"{label}: {out.get('ename')}: {value[0][:120] if value else ''}"
    return "a cell failed without an error output"


def execute(
    path: Path, output: Path, *, timeout: int, html: bool = False, log_dir: Path | None = None
) -> NotebookRun:
    """Run the notebook at ``path`` in a fresh kernel and write the executed copy to ``output``
    (and ``output`` with ``.html`` when ``html``); the error, if any, names the failing cell.
    The kernel's own terminal output goes to ``<log_dir or output's folder>/<name>.kernel.log``."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    output.parent.mkdir(parents=True, exist_ok=True)
    log_dir = output.parent if log_dir is None else log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{output.stem}.kernel.log"
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    error = None
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as kernel_output:
        try:
            client.execute(stdout=kernel_output, stderr=kernel_output)
        except CellExecutionError:
            error = _failed_cell(nb)
        except CellTimeoutError as exc:
            error = f"a cell ran past {timeout} s: {str(exc).splitlines()[0][:120]}"
        except DeadKernelError as exc:
            error = f"the kernel died: {str(exc).splitlines()[0][:120]}"
    seconds = time.perf_counter() - start
    nbformat.write(nb, output)
    if html:
        from nbconvert import HTMLExporter

        # The classic template writes each image's alt text (chapter20.core.plotting sets it).
        body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
        output.with_suffix(".html").write_text(body, encoding="utf-8")
    return NotebookRun(path.stem, seconds, error, output, log)


def recording_environment() -> dict[str, str]:
    """The environment committed outputs are recorded and checked in: on an x86 CPU, PyTorch's
    AVX2 kernels, its own and oneDNN's. An AVX-512 CPU would otherwise pick kernels that sum in
    another order, and a live rerun that matches its record to the last digit on one machine
    prints another held-out recall on the next (notebook 02's strategies: one pair of 1,246).
    oneDNN is held to AVX2 too: on a CPU with AMX, bf16 attention otherwise packs its operands
    for AMX and then fails in PyTorch's AVX2 kernel ("pack_vnni2 is only supported when avx512
    is supported"). Every x86 CPU since 2013 has AVX2; other CPUs keep their own kernels ({})."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    return {}


def wait_until_quiet(threshold: float, wait: float) -> float:
    """Measure how busy the machine is; while it is above ``threshold``, measure again, up to
    ``wait`` seconds. Returns the last measurement (the first over a third of a second: thirty
    clock ticks per core tell a quiet machine from a busy one, and thirteen notebooks pay it
    once each)."""
    from chapter20.core.measure import machine_busy

    deadline = time.monotonic() + wait
    busy = machine_busy(0.3)
    while busy > threshold and time.monotonic() < deadline:
        busy = machine_busy(5.0)
    return busy


def record_claims(path: Path) -> None:
    """Write this run's owner rows (``$CHAPTER20_RESULTS``) as the committed claims record."""
    import platform

    import torch

    from chapter20.core.claims import recorded_rows, write_record

    machine = (
        f"{platform.machine()} {platform.system()}, {torch.get_num_threads()} torch threads, "
        f"{os.cpu_count()} cores, torch {torch.__version__}"
    )
    target = write_record(recorded_rows(), machine, path)
    print(f"claims record: {target} ({machine})")


def main(argv: list[str] | None = None) -> int:
    """Execute the notebooks in order (``make run``, ``make notebooks``); non-zero on a failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, help="notebooks, run in this order")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--output-dir", type=Path, help="write the executed copies here")
    where.add_argument("--inplace", action="store_true", help="overwrite each notebook")
    parser.add_argument("--html", action="store_true", help="also write an HTML page of each")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    parser.add_argument(
        "--quiet-below", type=float, default=0.25,
        help="with --inplace: the share of busy CPU above which recording waits, then refuses",
    )  # fmt: skip
    parser.add_argument("--wait", type=float, default=300.0, help="seconds to wait for quiet")
    parser.add_argument("--force", action="store_true", help="record even on a busy machine")
    parser.add_argument("--record-claims", type=Path, default=None, help="write the record here")
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=None,
        help="kernel logs (default: the output folder; with --inplace, build/notebook-logs)",
    )
    args = parser.parse_args(argv)
    if args.inplace:
        for name, value in recording_environment().items():
            os.environ.setdefault(name, value)  # inherited by every kernel started below
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    width = max(len(p.stem) for p in args.notebooks)
    runs = []
    total = time.perf_counter()
    for path in args.notebooks:
        output = path if args.inplace else args.output_dir / path.name
        log_dir = args.log_dir or (Path("build/notebook-logs") if args.inplace else None)
        busy = wait_until_quiet(args.quiet_below, args.wait if args.inplace else 0.0)
        if args.inplace and busy > args.quiet_below and not args.force:
            print(
                f"refusing to record {path.name}: other work keeps {busy:.0%} of the CPU busy "
                f"(above {args.quiet_below:.0%} for {args.wait:.0f} s), so its timings would "
                "describe that work; stop it, or pass --force to record anyway",
                flush=True,
            )
            return 3
        run = execute(path, output, timeout=args.timeout, html=args.html, log_dir=log_dir)
        runs.append(replace(run, busy=busy))
        print(runs[-1].line(width), flush=True)
    failed = [run.name for run in runs if run.error]
    summary = f"{len(runs) - len(failed)} of {len(runs)} notebooks ran without errors"
    print(
        f"{summary} in {time.perf_counter() - total:.0f} s" + (f"; failed: {failed}" * bool(failed))
    )
    if args.output_dir is not None:
        print(f"executed notebooks{' and HTML' * args.html}: {args.output_dir}/")
    if args.record_claims is not None and not failed:
        record_claims(args.record_claims)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
