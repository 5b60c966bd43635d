"""Command line: ``chapter20 env | audit | bench NAME | train`` (also ``python -m chapter20 ...``).

- ``env``    each dependency as [OK] / [FAIL] with its version, and the device chosen.
- ``audit``  every claim C01–C30 with the latest verdict the executed notebooks measured.
- ``bench``  a named benchmark (``bench`` alone lists them); each prints ratios measured in one run.
  Its sizes are options (``chapter20 bench NAME --help`` lists them); a size left out is its
  default times ``--scale``, else ``$CHAPTER20_SCALE``, else 1. A benchmark that takes a
  configuration (``bench word2vec``: a ``Word2VecConfig``) takes its fields as options too.
  Every benchmark first prints the settings it runs with, as the options that rerun it.
  ``--record`` appends its figures to ``data/gpu_measurements.csv``
  (``chapter20.core.gpu_record``): the rows the benchmark returns, if any, and its wall time
  (``make gpu-check`` uses it).
- ``train``  the capstone run (``chapter20/scripts/train.py``: plan, cost, training with every
  technique, resume, evaluation); ``chapter20 train --help`` lists its flags.

A new command is one entry of :data:`COMMANDS`: its help line, a function that adds its
arguments to its sub-parser, and a function that runs it and returns the exit status.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import os
import platform
import shlex
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass

from chapter20.core.options import add_options, config_fields, from_options

#: Benchmark name → (module, function, what it measures). Section modules own their benchmark;
#: the import is lazy so that one benchmark's dependencies never slow another.
BENCHMARKS: dict[str, tuple[str, str, str]] = {
    "step-memory": (
        "chapter20.labs.nb00_overview",
        "benchmark",
        "peak memory of one Adam step: measured / predicted per component",
    ),
    "sharding": (
        "chapter20.labs.nb01_sharding",
        "benchmark",
        "sharded embedding: bytes per collective vs formula; throughput vs nn.Embedding",
    ),
    "contrastive": (
        "chapter20.labs.nb02_contrastive",
        "benchmark",
        "gradient caching vs the same batch at once: peak memory and step time",
    ),
    "precision": (
        "chapter20.labs.nb03_precision",
        "benchmark",
        "bf16 (and fp16 on GPUs) vs fp32: step time and peak memory of the Transformer encoder",
    ),
    "precision-quality": (
        "chapter20.labs.nb03_precision",
        "quality_benchmark",
        "fp32 vs fp16 held-out recall of the Transformer encoder, long enough to learn (C27)",
    ),
    "checkpointing": (
        "chapter20.labs.nb04_activation_checkpointing",
        "benchmark",
        "activation checkpointing policies: activation memory and step time vs none",
    ),
    "optimizers": (
        "chapter20.labs.nb05_optimizers",
        "benchmark",
        "optimizer state bytes and step time: AdamW vs 8-bit AdamW",
    ),
    "ddp": (
        "chapter20.labs.nb06_distributed",
        "benchmark",
        "2-process DDP scaling efficiency here; fitted alpha-beta of gloo's all-reduce",
    ),
    "parallelism": (
        "chapter20.labs.nb12_parallelism",
        "benchmark",
        "pipeline bubble, ZeRO-1 state per rank, DDP overlap vs bucket size",
    ),
    "faults": (
        "chapter20.labs.nb07_faults",
        "fault_matrix_benchmark",
        "notebook 07's fault matrix: each fault of a checkpoint writer injected for real, and what "
        "the next run finds",
    ),
    "recommender": (
        "chapter20.labs.nb01_recommender",
        "recommender_benchmark",
        "notebook 01: two-tower held-out item recall@10, the untrained tables and the "
        "shuffled-users control, 3 seeds",
    ),
    "batch-strategies": (
        "chapter20.labs.nb02_strategies",
        "strategy_benchmark",
        "notebook 02: four batch strategies, the untrained encoder and the τ = 1 control, 3 seeds, "
        "held-out recall",
    ),
    "optimizer-quality": (
        "chapter20.labs.nb05_optimizers",
        "quality_benchmark",
        "notebook 05: AdamW, 8-bit AdamW, the 4-bit control and the untrained encoder, held-out "
        "recall, 3 seeds",
    ),
    "checklist-memory": (
        "chapter20.labs.nb05_optimizers",
        "memory_benchmark",
        "notebook 05: the §20.3 checklist replay and the planner's configurations, peak bytes by "
        "component",
    ),
    "practices": (
        "chapter20.labs.nb12_practices",
        "benchmark",
        "AdamW implementations, DataLoader workers and pinned memory, two nodes on localhost",
    ),
    "cost-throughput": (
        "chapter20.labs.nb08_cost",
        "benchmark",
        "notebook 08's workload: step seconds per precision and batch on CUDA (the cost model)",
    ),
    "word2vec-quality": (
        "chapter20.labs.nb09_study",
        "quality_benchmark",
        "skip-gram trainers against gensim and data-parallel word2vec, 3 seeds, with the untrained "
        "vectors and the controls (notebook 09's record)",
    ),
    "word2vec": (
        "chapter20.labs.nb09_word2vec",
        "benchmark",
        "skip-gram negative sampling and hierarchical softmax vs gensim: words/s, Spearman rho",
    ),
    "word2vec-gpu": (
        "chapter20.labs.nb09_word2vec",
        "gpu_benchmark",
        "skip-gram on CUDA vs gensim on every CPU core of the host: words/s, Spearman rho",
    ),
    "training": (
        "chapter20.labs.nb11_composed_step",
        "benchmark",
        "the composed step (bf16, gradient caching, checkpointing, 8-bit) vs the plain step",
    ),
    "recipe": (
        "chapter20.labs.nb11_recipe",
        "recipe_benchmark",
        "the capstone recipe search from a random start, chosen on validation MRR",
    ),
    "scaling": (
        "chapter20.labs.nb11_scaling",
        "scaling_benchmark",
        "what scale buys: width, batch (C01) or training text, 3 seeds, early stopping",
    ),
    "ablation": (
        "chapter20.labs.nb11_ablation",
        "ablation_benchmark",
        "the composed step with each memory technique off, 3 seeds, against the seed noise",
    ),
    "baselines": (
        "chapter20.labs.nb11_baselines",
        "baselines_benchmark",
        "TF-IDF, LSI (size chosen on validation), Doc2Vec, BM25 on two corpora, 3 seeds",
    ),
    "bpe-sizes": (
        "chapter20.labs.nb10_records",
        "bpe_benchmark",
        "BPE vocabularies of several sizes: tokens per word, UNK, round trip, word OOV (C30)",
    ),
    "autoencoder": (
        "chapter20.labs.nb10_vocab",
        "autoencoder_benchmark",
        "an autoencoder (epochs chosen on validation) vs PCA at 300 dims: held-out error, accuracy",
    ),
    "subwords": (
        "chapter20.labs.nb10_word_vectors",
        "subword_benchmark",
        "word vectors vs composed BPE subword vectors, WordSim-353, 3 seeds, a control (C30)",
    ),
    "vocab": (
        "chapter20.labs.nb10_vocab",
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
    """``chapter20 env``: each dependency [OK] or [FAIL], then the device; 1 if one failed."""
    from chapter20.core.device import DEPENDENCIES, check_dependency, describe_environment

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


def cmd_audit(width: int, criteria: bool = False) -> int:
    """``chapter20 audit``: every claim with its latest verdict (this run's, else the record);
    ``--criteria``: then each claim's criterion, one line each, as ``data/claims.csv`` has it."""
    from chapter20.core.claims import NOT_YET_MEASURED, audit, audit_text, load_claims
    from chapter20.core.paths import results_dir

    frame = audit()
    print(audit_text(frame, width))
    if criteria:
        print("\ncriteria (the measured quantity, the workload, the comparison, the tolerance):")
        for claim in load_claims().values():
            print(f"{claim.id:<4} {claim.criterion} [{claim.comparison()}]")
    counts = frame["verdict"].value_counts()
    print(
        f"\n{len(frame)} claims, each judged by its owner notebook (data/claims.csv): "
        + ", ".join(f"{v}: {n}" for v, n in counts.items())
    )
    measured = (frame["verdict"] != NOT_YET_MEASURED).sum()
    this_run = int((frame["shown"] == "this run").sum())
    print(f"{measured} row(s) measured: {this_run} read from {results_dir()} (this run)")
    for provenance, count in (
        frame.loc[~frame["shown"].isin(["this run", ""]), "shown"].value_counts().items()
    ):
        print(f"  {count} from the committed record (data/claims_recorded.json), {provenance}")
    return 0


def _parse_tuple(item_type: type) -> Callable[[str], tuple]:
    def parse(text: str) -> tuple:
        try:
            # 10_000 reads as a number; a name keeps its underscores
            digits = item_type in (int, float)
            return tuple(
                item_type(part.replace("_", "") if digits else part)
                for part in text.split(",")
                if part
            )
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {item_type.__name__} values, got {text!r}"
            ) from None

    return parse


def _option_type(annotation: object) -> Callable[[str], object]:
    """The argparse type for a benchmark parameter's annotation (int, float, str, tuple[T, ...])."""
    if typing.get_origin(annotation) is tuple:
        return _parse_tuple(typing.get_args(annotation)[0])
    if annotation in (int, float):

        def number(text: str) -> int | float:
            return annotation(text.replace("_", ""))

        number.__name__ = annotation.__name__  # argparse: "invalid int value: '1.5'"
        return number
    if annotation is str:
        return str
    raise TypeError(f"benchmark parameters must be int, float, str or tuple, got {annotation!r}")


def _positive_scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"--scale must be a positive number, got {text!r}")
    return value


#: Integer parameters of a benchmark that count repetitions, micro-batches or ranks, not problem
#: size: never scaled.
NOT_SIZES = frozenset(
    {"repeats", "repeat", "warmup", "seed", "seeds", "micro_batches", "world_sizes"}
)


def _is_size(param: inspect.Parameter) -> bool:
    if param.name in NOT_SIZES:
        return False
    args = typing.get_args(param.annotation)
    return param.annotation is int or (typing.get_origin(param.annotation) is tuple and int in args)


def _is_config(param: inspect.Parameter) -> bool:
    """Whether a benchmark parameter is a configuration (a dataclass type, e.g.
    ``Word2VecConfig``): its fields become options, none of them scaled."""
    return isinstance(param.annotation, type) and dataclasses.is_dataclass(param.annotation)


def _benchmark_parameters(fn: Callable[..., object]) -> list[inspect.Parameter]:
    """The parameters of a benchmark function; ``TypeError`` where a configuration's field
    would take the option of another parameter."""
    params = list(inspect.signature(fn, eval_str=True).parameters.values())
    names = [p.name for p in params if not _is_config(p)]
    for param in filter(_is_config, params):
        names += [f.name for f, _ in config_fields(param.annotation)]
    if len(names) != len(set(names)):
        raise TypeError(f"{fn.__name__}'s parameters and configuration fields share a name")
    return params


def benchmark_parser(name: str) -> tuple[argparse.ArgumentParser, Callable[..., object]]:
    """The parser of ``bench NAME``: one option per parameter of the benchmark function
    (``vocab_sizes`` -> ``--vocab-sizes 20000,100000``), one per field of a parameter that is a
    configuration (``config: Word2VecConfig`` -> ``--dim``, ``--negative``, ..., defaults from
    the parameter's default), and ``--scale`` when it has sizes.

    A size option left out takes its default times the scale: ``--scale``, else
    ``$CHAPTER20_SCALE`` (``chapter20.core.device.size_scale``), else 1.
    """
    module, function, what = BENCHMARKS[name]
    fn = getattr(importlib.import_module(module), function)
    parser = argparse.ArgumentParser(prog=f"chapter20 bench {name}", description=what)
    params = _benchmark_parameters(fn)
    if any(map(_is_size, params)):
        parser.add_argument(
            "--scale",
            type=_positive_scale,
            default=None,
            help="multiply the default sizes (default: $CHAPTER20_SCALE, else 1)",
        )
    parser.add_argument(
        "--record",
        action="store_true",
        help="append the figures to data/gpu_measurements.csv (make gpu-check)",
    )
    for param in params:
        if _is_config(param):
            group = parser.add_argument_group(f"{param.name}: {param.annotation.__name__}")
            add_options(group, param.annotation, param.default)
            continue
        default = param.default
        shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
        parser.add_argument(
            "--" + param.name.replace("_", "-"),
            dest=param.name,
            type=_option_type(param.annotation),
            default=None,
            metavar=param.name.upper(),
            help=f"default: {shown}" + (" x scale" if _is_size(param) else ""),
        )
    return parser, fn


def benchmark_arguments(name: str, options: list[str]) -> tuple[Callable[..., object], dict, bool]:
    """The benchmark function of ``bench NAME``, its keyword arguments from ``options``, and
    whether ``--record`` was given."""
    from chapter20.core.device import SCALE_ENV_VAR, scaled

    parser, fn = benchmark_parser(name)
    namespace = parser.parse_args(options)
    kwargs = vars(namespace).copy()
    record = kwargs.pop("record")
    scale = kwargs.pop("scale", None)
    if scale is not None:  # the library's own scaled sizes follow the same factor
        os.environ[SCALE_ENV_VAR] = repr(scale)
    for param in _benchmark_parameters(fn):
        if _is_config(param):
            for f, _ in config_fields(param.annotation):
                kwargs.pop(f.name)
            try:  # the configuration checks its own fields: a refused value is a usage error
                kwargs[param.name] = from_options(param.annotation, namespace)
            except (ValueError, TypeError) as exc:
                parser.error(str(exc))
            continue
        if kwargs[param.name] is not None:
            continue
        default = param.default
        if _is_size(param):
            default = (
                tuple(scaled(v) for v in default) if isinstance(default, tuple) else scaled(default)
            )
        kwargs[param.name] = default
    return fn, kwargs, record


def _option_text(name: str, value: object) -> str:
    """``value`` as the option ``--name`` that sets it: a tuple comma-separated, None as
    ``none``, a bool as ``--name`` / ``--no-name``; quoted for a shell where needed."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + name.replace("_", "-")
    if isinstance(value, tuple):
        value = ",".join(map(str, value))
    return f"{flag} {shlex.quote('none' if value is None else str(value))}"


def settings_lines(fn: Callable[..., object], kwargs: dict) -> list[str]:
    """What a benchmark ran with, as options that rerun it: one line of its keyword arguments
    (sizes after scaling), and one line per configuration with every field's value (a switch
    left unset, None, by leaving its option out)."""
    plain, configs = [], []
    for param in _benchmark_parameters(fn):
        value = kwargs[param.name]
        if _is_config(param):
            fields = []
            for f, hint in config_fields(param.annotation):
                field_value = getattr(value, f.name)
                if field_value is None and bool in typing.get_args(hint):
                    continue  # an unset switch has no option: leaving it out is how to say it
                fields.append(_option_text(f.name, field_value))
            configs.append(f"{param.name} ({param.annotation.__name__}): {' '.join(fields)}")
        else:
            plain.append(_option_text(param.name, value))
    return [f"settings: {' '.join(plain) or '(none)'}", *configs]


def _record(name: str, figures: list[dict] | None, seconds: float) -> None:
    """Append a benchmark's figures and wall time to the GPU measurements file."""
    from chapter20.core.gpu_record import append_gpu_measurements, gpu_measurements_path

    command = f"chapter20 bench {name}"
    rows = [{"command": command, **row} for row in (figures or [])]
    rows.append(
        {"command": command, "quantity": "wall time", "value": round(seconds, 1), "unit": "s",
         "notes": "the whole benchmark"}
    )  # fmt: skip
    written = append_gpu_measurements(rows)
    print(f"recorded {written} row(s) in {gpu_measurements_path().name}")


def cmd_bench(name: str | None, options: list[str]) -> int:
    """``chapter20 bench [NAME]``: the list of benchmarks, or one run with its options."""
    if name is None or name not in BENCHMARKS:
        if name is not None:
            print(f"unknown benchmark {name!r}", file=sys.stderr)
        print("benchmarks:")
        for key, (_, _, what) in BENCHMARKS.items():
            print(f"  {key:<14} {what}")
        print("chapter20 bench NAME --help shows a benchmark's size options.")
        return 0 if name is None else 2
    fn, kwargs, record = benchmark_arguments(name, options)
    print("\n".join(settings_lines(fn, kwargs)))
    start = time.perf_counter()
    figures = fn(**kwargs)
    if record:
        _record(name, figures, time.perf_counter() - start)
    return 0


def cmd_train(options: list[str]) -> int:
    """``chapter20 train``: the capstone run (§20.6), ``chapter20.capstone.run``."""
    from chapter20.capstone.run import main as train_main

    train_main(options)
    return 0


def _train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "options", nargs=argparse.REMAINDER, help="the flags of chapter20/scripts/train.py"
    )


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command without options."""


def _audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--width", type=_width, default=60, help="max characters of claim text (>= 20)"
    )
    parser.add_argument(
        "--criteria", action="store_true", help="also print each claim's criterion, one line each"
    )


def _bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="benchmark name (none: list them)")
    parser.add_argument(
        "options",
        nargs=argparse.REMAINDER,
        help="--scale X and the benchmark's own size options (see: bench NAME --help)",
    )


@dataclass(frozen=True)
class Command:
    """One sub-command of ``chapter20``: its help line, its arguments, and what it runs."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


#: The sub-commands, in the order ``--help`` lists them. Add a command by adding an entry.
COMMANDS: dict[str, Command] = {
    "env": Command(
        "check the dependencies and show the device", _no_arguments, lambda args: cmd_env()
    ),
    "audit": Command(
        "print the claims audit (latest measured verdict per claim)",
        _audit_arguments,
        lambda args: cmd_audit(args.width, args.criteria),
    ),
    "bench": Command(
        "run a named benchmark (no name: list them)",
        _bench_arguments,
        lambda args: cmd_bench(args.name, args.options),
    ),
    "train": Command(
        "train the capstone encoder with every technique (scripts/train.py)",
        _train_arguments,
        lambda args: cmd_train(args.options),
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The ``chapter20`` parser, one sub-parser per entry of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="chapter20",
        description="The runnable companion to 'Scaling Embedding Training' "
        "(also: python -m chapter20).",
        epilog="chapter20 COMMAND --help shows a command's options.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in COMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.help, description=command.help))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``chapter20`` with ``argv`` (default: the process's arguments); the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:  # every flag after it, --help too, is scripts/train.py's
        return cmd_train(argv[1:])
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
