"""Command line: ``python -m chapter20 env | audit | bench NAME``.

- ``env``    each dependency as [OK] / [FAIL] with its version, and the device chosen.
- ``audit``  every claim C01–C30 with the latest verdict the executed notebooks measured.
- ``bench``  a named benchmark (``bench`` alone lists them); each prints ratios measured in one run.
  ``--record`` appends its figures to ``data/gpu_measurements.csv`` (``chapter20.gpu_log``):
  the rows the benchmark returns, if any, and its wall time (``make gpu-check`` uses it).
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time

#: Benchmark name → (module, function, what it measures). Section modules own their benchmark;
#: the import is lazy so that one benchmark's dependencies never slow another.
BENCHMARKS: dict[str, tuple[str, str, str]] = {
    "step-memory": (
        "chapter20.overview",
        "benchmark",
        "peak memory of one Adam step: measured / predicted per component",
    ),
    "sharding": (
        "chapter20.sharding_lab",
        "benchmark",
        "sharded embedding: bytes per collective vs formula; throughput vs nn.Embedding",
    ),
    "contrastive": (
        "chapter20.contrastive_lab",
        "benchmark",
        "gradient caching vs the same batch at once: peak memory and step time",
    ),
    "precision": (
        "chapter20.precision_lab",
        "benchmark",
        "bf16 (and fp16 on GPUs) vs fp32: step time and peak memory of the Transformer encoder",
    ),
    "checkpointing": (
        "chapter20.checkpointing_lab",
        "benchmark",
        "activation checkpointing policies: activation memory and step time vs none",
    ),
    "optimizers": (
        "chapter20.optimizers_lab",
        "benchmark",
        "optimizer state bytes and step time: AdamW vs 8-bit AdamW",
    ),
    "ddp": (
        "chapter20.distributed_lab",
        "benchmark",
        "2-process DDP scaling efficiency here; fitted alpha-beta of gloo's all-reduce",
    ),
    "word2vec": (
        "chapter20.word2vec_lab",
        "benchmark",
        "skip-gram negative sampling and hierarchical softmax vs gensim: words/s, Spearman rho",
    ),
    "word2vec-gpu": (
        "chapter20.word2vec_lab",
        "gpu_benchmark",
        "skip-gram on CUDA vs gensim on every CPU core of the host: words/s, Spearman rho",
    ),
    "vocab": (
        "chapter20.vocab_lab",
        "benchmark",
        "10,000-dim bag-of-words: PCA to 300 vs Linear/EmbeddingBag, bytes and step time",
    ),
}


def _width(text: str) -> int:
    value = int(text)
    if value < 20:
        raise argparse.ArgumentTypeError(f"--width must be >= 20, got {value}")
    return value


def _status(ok: bool) -> str:
    return "[OK]  " if ok else "[FAIL]"


def cmd_env() -> int:
    from chapter20.device import DEPENDENCIES, check_dependency, describe_environment

    failures = 0
    py_ok = sys.version_info >= (3, 10)
    print(f"{_status(py_ok)} python {platform.python_version()} (needs >= 3.10)")
    failures += not py_ok
    for module, _ in DEPENDENCIES:
        dep = check_dependency(module)
        print(f"{_status(dep.ok)} {module} {dep.version if dep.ok else dep.detail}")
        failures += not dep.ok
    if failures == 0 or check_dependency("torch").ok:
        info = describe_environment()
        gpu = f", {info['gpu']} x{info['gpu_count']}" if "gpu" in info else ""
        print(
            f"device: {info['device']}{gpu} | distributed backend: {info['dist_backend']} | "
            f"autocast dtype: {info['autocast_dtype']} | torch threads: {info['cpu_threads']}"
        )
    print("all dependencies OK" if failures == 0 else f"{failures} dependency check(s) failed")
    return 0 if failures == 0 else 1


def cmd_audit(width: int) -> int:
    from chapter20.claims import NOT_YET_MEASURED, audit, audit_text
    from chapter20.paths import results_dir

    frame = audit()
    print(audit_text(frame, width))
    counts = frame.drop_duplicates("id", keep="last")["verdict"].value_counts()
    print("\nverdicts (latest per claim): " + ", ".join(f"{v}: {n}" for v, n in counts.items()))
    measured = (frame["verdict"] != NOT_YET_MEASURED).sum()
    print(f"{measured} row(s) measured, read from {results_dir()}")
    return 0


def cmd_bench(name: str | None, record: bool = False) -> int:
    if name is None or name not in BENCHMARKS:
        if name is not None:
            print(f"unknown benchmark {name!r}", file=sys.stderr)
        print("benchmarks:")
        for key, (_, _, what) in BENCHMARKS.items():
            print(f"  {key:<14} {what}")
        return 0 if name is None else 2
    module, function, _ = BENCHMARKS[name]
    start = time.perf_counter()
    figures = getattr(importlib.import_module(module), function)()
    if record:
        from chapter20.gpu_log import append_gpu_measurements, gpu_measurements_path

        command = f"python -m chapter20 bench {name}"
        rows = [{"command": command, **row} for row in (figures or [])]
        wall = time.perf_counter() - start
        rows.append({"command": command, "quantity": "wall time", "value": round(wall, 1),
                     "unit": "s", "notes": "the whole benchmark"})  # fmt: skip
        written = append_gpu_measurements(rows)
        print(f"recorded {written} row(s) in {gpu_measurements_path().name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chapter20", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("env", help="check dependencies and show the device")
    audit_parser = sub.add_parser("audit", help="print the claims audit table")
    audit_parser.add_argument(
        "--width", type=_width, default=60, help="max characters of claim text (>= 20)"
    )
    bench_parser = sub.add_parser("bench", help="run a named benchmark (no name: list them)")
    bench_parser.add_argument("name", nargs="?", help="benchmark name")
    bench_parser.add_argument(
        "--record", action="store_true", help="append the figures to data/gpu_measurements.csv"
    )
    args = parser.parse_args(argv)
    if args.command == "env":
        return cmd_env()
    if args.command == "audit":
        return cmd_audit(args.width)
    return cmd_bench(args.name, args.record)


if __name__ == "__main__":
    sys.exit(main())
