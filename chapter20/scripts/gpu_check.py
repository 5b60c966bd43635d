"""``make gpu-check``: run the companion's GPU checks on a machine with a CUDA GPU, in minutes,
and append the figures, dated, to ``data/gpu_measurements.csv`` (``chapter20.core.gpu_record``).

    python chapter20/scripts/gpu_check.py             # run every step it can (budget 300 s)
    python chapter20/scripts/gpu_check.py --dry-run   # say what would run and what is skipped

Steps, in order: the ``cuda``-marked tests; ``bench precision``, ``bench step-memory``, ``bench
optimizers`` (bitsandbytes 8-bit), ``bench word2vec-gpu`` (ours on CUDA vs gensim on every host
core, both objectives, ρ side by side), ``bench training`` (once ``chapter20/training/trainer.py``
registers it) and ``bench cost-throughput`` (notebook 08's workload per precision and batch, with
the code version C21 reads); notebooks 03 and 09 executed on CUDA into ``build/gpu-check/``. Each
step runs in its own process, with what is left of the time budget as its timeout; a step whose
packages are missing (e.g. gensim, bitsandbytes, nbconvert) is skipped and the summary says why.
Without a CUDA GPU every step is skipped: nothing here measures a CPU. Exit status: 0 when no step
that ran failed.

Packages beyond torch: numpy, pandas, matplotlib, tqdm and pytest for the tests and benches;
gensim for ``word2vec-gpu`` and notebook 09; bitsandbytes for ``optimizers``; nbconvert,
nbclient and ipykernel for the notebooks.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASE = ("numpy", "pandas", "matplotlib", "tqdm")
NOTEBOOK = ("nbconvert", "nbclient", "ipykernel")
OUT_DIR = "build/gpu-check"


@dataclass(frozen=True)
class Step:
    """One check: its command (run from the repository root), the modules it needs, and
    whether it appends its own figures (``bench --record``)."""

    name: str
    command: tuple[str, ...]
    needs: tuple[str, ...]
    records_itself: bool = False


def _bench(name: str, *needs: str) -> Step:
    command = (sys.executable, "-m", "chapter20", "bench", name, "--record")
    return Step(f"bench {name}", command, BASE + needs, records_itself=True)


def _notebook(path: str, *needs: str) -> Step:
    command = (
        sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
        "--ExecutePreprocessor.timeout=600", "--ExecutePreprocessor.kernel_name=python3",
        "--output-dir", OUT_DIR, path,
    )  # fmt: skip
    return Step(f"notebook {Path(path).stem}", command, BASE + NOTEBOOK + needs)


STEPS = (
    Step(
        "cuda tests",
        (sys.executable, "-m", "pytest", "-m", "cuda", "tests", "-q", "-p", "no:cacheprovider"),
        BASE + ("pytest",),
    ),  # fmt: skip
    _bench("precision"),
    _bench("step-memory"),
    _bench("optimizers", "bitsandbytes"),
    _bench("word2vec-gpu", "gensim"),
    _bench("training"),
    _bench("cost-throughput"),
    _notebook("notebooks/03_mixed_precision.ipynb"),
    _notebook("notebooks/09_efficient_sampling.ipynb", "gensim"),
)


def available_benchmarks() -> set[str]:
    """The benchmark names ``python -m chapter20 bench`` knows in this checkout."""
    from chapter20.cli.main import BENCHMARKS

    return set(BENCHMARKS)


def plan(
    steps: tuple[Step, ...], cuda: bool, installed: Callable[[str], bool], benchmarks: set[str]
) -> list[tuple[Step, str | None]]:
    """Each step with the reason it is skipped (``None``: it runs): no CUDA GPU, a missing
    package, or a benchmark this checkout does not have (``bench training`` until issue 17)."""
    out = []
    for step in steps:
        missing = [m for m in step.needs if not installed(m)]
        bench = step.command[4] if step.command[3:4] == ("bench",) else None
        if not cuda:
            reason = "no CUDA GPU"
        elif missing:
            reason = f"{', '.join(missing)} not installed"
        elif bench is not None and bench not in benchmarks:
            reason = f"no 'bench {bench}' in this checkout"
        else:
            reason = None
        out.append((step, reason))
    return out


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _summary(output: str) -> str:
    """The line of a step's output worth keeping: pytest's tally, else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    tally = [line for line in lines if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    return (tally or lines or [""])[-1][:300]


def run_steps(
    planned: list[tuple[Step, str | None]],
    budget: float,
    runner: Callable[[Step, float], tuple[int | None, str]],
    clock: Callable[[], float] = time.perf_counter,
) -> list[dict]:
    """Run the planned steps in order with ``runner(step, timeout) -> (status, output)``
    (status None: timed out) until ``budget`` seconds are spent; returns one result per step:
    name, status (``passed``, ``failed``, ``timed out``, ``skipped``), seconds, detail."""
    start = clock()
    results = []
    for step, reason in planned:
        left = budget - (clock() - start)
        if reason is None and left <= 1:
            reason = "time budget spent"
        if reason is not None:
            results.append({"step": step.name, "status": "skipped", "seconds": 0.0,
                            "detail": reason})  # fmt: skip
            continue
        began = clock()
        code, output = runner(step, left)
        status = "timed out" if code is None else ("passed" if code == 0 else "failed")
        results.append({"step": step.name, "status": status, "seconds": clock() - began,
                        "detail": _summary(output)})  # fmt: skip
    return results


def _subprocess_runner(step: Step, timeout: float) -> tuple[int | None, str]:
    os.makedirs(ROOT / OUT_DIR, exist_ok=True)
    env = {**os.environ, "CHAPTER20_RESULTS": str(ROOT / OUT_DIR / "claims")}
    env.pop("MPLBACKEND", None)  # notebooks draw inline
    try:
        done = subprocess.run(
            step.command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as error:
        out = error.stdout.decode() if isinstance(error.stdout, bytes) else (error.stdout or "")
        return None, out
    sys.stdout.write(done.stdout)
    return done.returncode, done.stdout + done.stderr


def _record(results: list[dict], steps: tuple[Step, ...]) -> int:
    """Each step that ran: its wall time and status (benchmarks also record their figures)."""
    from chapter20.core.gpu_record import append_gpu_measurements

    commands = {s.name: " ".join(Path(c).name if i == 0 else c for i, c in enumerate(s.command))
                for s in steps}  # fmt: skip
    rows = [
        {"command": commands[r["step"]], "quantity": "step wall time",
         "value": round(r["seconds"], 1), "unit": "s", "notes": f"{r['status']}: {r['detail']}"}
        for r in results if r["status"] != "skipped"
    ]  # fmt: skip
    return append_gpu_measurements(rows) if rows else 0


def main(argv: list[str] | None = None) -> int:
    """``make gpu-check``: run what fits the budget on CUDA and append the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for all steps")
    parser.add_argument("--dry-run", action="store_true", help="only say what would run")
    parser.add_argument("--no-record", action="store_true", help="do not write the record")
    args = parser.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    steps = STEPS
    if args.no_record:
        steps = tuple(
            Step(s.name, tuple(c for c in s.command if c != "--record"), s.needs, False)
            for s in STEPS
        )
    planned = plan(steps, cuda, _installed, available_benchmarks())
    device = torch.cuda.get_device_name(0) if cuda else "no CUDA GPU"
    print(f"gpu-check on {device} (torch {torch.__version__}), budget {args.budget:.0f} s")
    for step, reason in planned:
        print(f"  {'run ' if reason is None else 'skip'}  {step.name}"
              + ("" if reason is None else f"  ({reason})"))  # fmt: skip
    if args.dry_run or not cuda:
        if not cuda:
            print("nothing to check here: every step needs a CUDA GPU (run it on a GPU machine)")
        return 0
    results = run_steps(planned, args.budget, _subprocess_runner)
    print("\nsummary:")
    for r in results:
        print(f"  {r['status']:<9} {r['seconds']:6.1f} s  {r['step']}: {r['detail']}")
    if not args.no_record:
        written = _record(results, steps)
        print(f"recorded {written} step row(s) in data/gpu_measurements.csv")
    return 1 if any(r["status"] in ("failed", "timed out") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
