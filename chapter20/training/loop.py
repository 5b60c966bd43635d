"""§20.5.2 A training run that survives preemption: the loop behind ``scripts/spot_demo.py``.

The run trains the shared contrastive embedding model (bag-of-embeddings encoder, cross-rank
InfoNCE, AdamW with warm-up) on next-sentence pairs of the Wikipedia sample, through the composed
step of ``chapter20.training.trainer``; the techniques of that step can be switched on (precision,
gradient caching, a learned temperature, 8-bit state), so the proof covers the composed trainer's
whole state. Token dropout on the anchors draws from torch's global RNG, so the run depends on every
piece of state that :func:`chapter20.training.state.capture_state` saves. It always starts from the
newest checkpoint in its directory, so a killed run relaunched with the same arguments finishes with
exactly the parameters of a run that was never interrupted.

Chaos (``chaos_kills``) makes the fault injection part of the run: rank 0 draws a step, records
the kill in ``chaos.json``, and sends itself SIGKILL, as a reclaimed spot machine would be.
Each launch draws from ``chaos_seed`` + the kills so far, so a relaunch does not repeat a kill
forever. ``progress.jsonl`` logs (launch, step, wall time) for the timeline in notebook 07.

:func:`resumable_loop` is that loop for any trainer, sampler and batches: the capstone's run
(``chapter20.capstone.run``, ``scripts/train.py``) trains through it too.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from chapter20.core.checks import (
    check_int,
    check_optional_int,
    check_optional_positive,
    check_positive,
    check_real,
)
from chapter20.core.corpora import pair_data
from chapter20.core.device import deterministic_mode, set_seed
from chapter20.core.models import BagOfEmbeddingsEncoder
from chapter20.core.paths import repo_root
from chapter20.techniques.distributed import group_rank_and_size
from chapter20.training.checkpoints import CheckpointManager
from chapter20.training.preemption import EXIT_PREEMPTED, CheckpointSchedule, PreemptionHandler
from chapter20.training.sampler import ResumableBatchSampler
from chapter20.training.state import parameter_fingerprint
from chapter20.training.trainer import StepResult, TrainConfig, Trainer

__all__ = [
    "LoopResult",
    "LoopFields",
    "LoopSettings",
    "check_loop_settings",
    "SpotConfig",
    "launch_spot_demo",
    "start_spot_demo",
    "wait_for_spot_demos",
    "read_progress",
    "resumable_loop",
    "run_spot_training",
]

CHAOS_FILE = "chaos.json"
PROGRESS_FILE = "progress.jsonl"


@dataclass(frozen=True, kw_only=True)
class LoopFields:
    """The resumable loop's settings (§20.5.2) that every run's config carries, keyword-only:
    :class:`SpotConfig` and the capstone's ``chapter20.capstone.run.RunConfig`` inherit them
    and check them with :func:`check_loop_settings`. Checkpoints every ``checkpoint_every``
    steps and/or ``checkpoint_seconds``, the newest ``keep_last`` kept; ``chaos_kills``
    SIGKILLs (placed by ``chaos_seed``); ``step_delay`` seconds slept per step (to give a
    killer time); ``notice_file``: a preemption notice to watch; ``stop_after``: end the launch
    after that many steps as if killed; ``deterministic``: train under
    :func:`chapter20.core.device.deterministic_mode`."""

    checkpoint_every: int | None = 5
    checkpoint_seconds: float | None = None
    keep_last: int = 3
    chaos_kills: int = 0
    chaos_seed: int = 0
    step_delay: float = 0.0
    notice_file: str | None = None
    stop_after: int | None = None
    deterministic: bool = True


@dataclass(frozen=True)
class SpotConfig(LoopFields):
    """The settings of one spot training run (§20.5.2); the defaults finish in seconds on a CPU.

    The loop's settings (checkpoints, chaos, ``stop_after``, ``deterministic``) are
    :class:`LoopFields`' (keyword-only). ``precision``, ``chunk_size``, ``learn_temperature``
    and ``optimizer`` switch on the composed step's techniques (see
    ``chapter20.training.trainer.TrainConfig``).
    ``deterministic`` trains under :func:`chapter20.core.device.deterministic_mode` (one intra-op
    thread, MKL CNR, deterministic algorithms), without which bitwise resume is not guaranteed.
    """

    checkpoint_dir: str
    steps: int = 60
    global_batch: int = 64
    vocab: int = 2000
    dim: int = 32
    lr: float = 0.02
    warmup: int = 5
    token_dropout: float = 0.1
    seed: int = 0
    precision: str = "fp32"
    chunk_size: int | None = None
    learn_temperature: bool = False
    optimizer: str = "adamw"

    def __post_init__(self):
        check_loop_settings(self)
        for name in ("global_batch", "vocab", "dim", "warmup"):
            check_int(name, getattr(self, name), 1)
        check_int("seed", self.seed, 0)
        check_positive("lr", self.lr)
        if not 0.0 <= check_real("token_dropout", self.token_dropout, finite=True) < 1.0:
            raise ValueError(f"token_dropout must be in [0, 1), got {self.token_dropout}")
        self.train_config()  # checks the training switches

    def train_config(self) -> TrainConfig:
        """The composed step's settings of this run."""
        return TrainConfig(
            optimizer=self.optimizer,
            lr=self.lr,
            weight_decay=0.0,
            warmup_steps=self.warmup,
            precision=self.precision,
            chunk_size=self.chunk_size,
            temperature=0.05,
            learn_temperature=self.learn_temperature,
        )


@functools.lru_cache(maxsize=2)
def _training_pairs(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    data = pair_data(vocab_size=vocab)
    return data.train_anchors, data.train_positives


def _drop_tokens(ids: torch.Tensor, p: float) -> torch.Tensor:
    """Token dropout (augmentation) from the global RNG: each token becomes padding with
    probability ``p``, but every row keeps its first token so no text is empty."""
    if p == 0:
        return ids
    drop = torch.rand(ids.shape) < p
    drop[:, 0] = False
    return ids.masked_fill(drop, 0)


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return default


def _write_json_atomic(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def _planned_kill(config: LoopSettings, start_step: int, directory: Path) -> int | None:
    """The step after which this launch kills itself, or None (rank 0 only)."""
    kills = _read_json(directory / CHAOS_FILE, {"kills": []})["kills"]
    if len(kills) >= config.chaos_kills or start_step + 1 >= config.steps:
        return None
    rng = np.random.default_rng([config.chaos_seed, len(kills)])
    # Spread the remaining kills over the remaining steps (on average).
    remaining = config.chaos_kills - len(kills)
    span = max(2, 2 * (config.steps - start_step) // (remaining + 1))
    return int(rng.integers(start_step + 1, min(config.steps, start_step + span)))


def _kill_self(directory: Path, step: int) -> None:
    chaos = _read_json(directory / CHAOS_FILE, {"kills": []})
    chaos["kills"].append({"step": step, "time": time.time()})
    _write_json_atomic(directory / CHAOS_FILE, chaos)
    os.kill(os.getpid(), signal.SIGKILL)


class LoopSettings(Protocol):
    """What :func:`resumable_loop` reads of a run's settings (§20.5.2): :class:`SpotConfig` and
    the capstone's ``chapter20.capstone.run.RunConfig`` both have these fields."""

    checkpoint_dir: str
    steps: int
    checkpoint_every: int | None
    checkpoint_seconds: float | None
    keep_last: int
    chaos_kills: int
    chaos_seed: int
    step_delay: float
    notice_file: str | None
    stop_after: int | None
    deterministic: bool


def check_loop_settings(settings: LoopSettings) -> None:
    """Checks the fields of :class:`LoopSettings` (§20.5.2) that every run's config shares:
    ValueError/TypeError naming the field and what is allowed."""
    for name in ("steps", "keep_last"):
        check_int(name, getattr(settings, name), 1)
    for name in ("chaos_kills", "chaos_seed"):
        check_int(name, getattr(settings, name), 0)
    for name in ("checkpoint_every", "stop_after"):
        check_optional_int(name, getattr(settings, name), 1)
    check_optional_positive("checkpoint_seconds", settings.checkpoint_seconds)
    if check_real("step_delay", settings.step_delay, finite=True) < 0:
        raise ValueError(f"step_delay must be >= 0 seconds, got {settings.step_delay}")
    if settings.checkpoint_every is None and settings.checkpoint_seconds is None:
        raise ValueError("give checkpoint_every (steps), checkpoint_seconds, or both")
    if not isinstance(settings.deterministic, bool):
        raise TypeError(f"deterministic must be True or False, got {settings.deterministic!r}")


@dataclass
class LoopResult:
    """How one launch of :func:`resumable_loop` went: the step it ``resumed_from``, the step it
    reached, whether ``stop_after`` ended it (``stopped``, nothing saved), the seconds of each
    checkpoint save, the ``extra`` entries of the checkpoint it resumed from, and ``launch``
    (the SIGKILLs recorded before it started)."""

    resumed_from: int
    steps: int
    stopped: bool
    save_seconds: list[float]
    restored_extra: dict[str, Any]
    launch: int


def resumable_loop(
    trainer: Trainer,
    sampler: Any,
    next_batch: Callable[[], Any],
    settings: LoopSettings,
    *,
    step: Callable[[Any], StepResult] | None = None,
    after_step: Callable[[int, StepResult], None] | None = None,
    extra_state: Callable[[], dict[str, Any]] | None = None,
    on_restore: Callable[[dict[str, Any]], None] | None = None,
) -> LoopResult:
    """Train ``trainer`` from the newest checkpoint in ``settings.checkpoint_dir`` to
    ``settings.steps`` steps, surviving preemption (§20.5.2); every rank calls it.

    Each iteration takes ``next_batch()`` (which must draw from ``sampler``, whose position the
    checkpoints save), runs ``step(batch)`` (default ``trainer.step``) and then ``after_step(step,
    result)`` (progress, periodic evaluation: it must not draw from the RNG the training uses).
    Checkpoints go through :class:`chapter20.training.checkpoints.CheckpointManager` on
    ``settings``' schedule and at the last step, holding ``trainer.capture_state(sampler,
    **extra_state())``; ``on_restore(extra)`` sees those entries of the checkpoint it resumes from,
    before the first step (e.g. the evaluations made before a kill). Chaos kills, the progress log
    and preemption notices (SIGTERM, SIGINT, the notice file: save, then exit with
    :data:`EXIT_PREEMPTED`) are those of the module docstring.
    """
    directory = Path(settings.checkpoint_dir)
    manager = CheckpointManager(directory, settings.keep_last, group=trainer.group)
    schedule = CheckpointSchedule(settings.checkpoint_every, settings.checkpoint_seconds)
    state = manager.load_latest()
    start = trainer.restore_state(state, sampler) if state is not None else 0
    restored = dict(state["extra"]) if state is not None else {}
    if on_restore is not None and state is not None:
        on_restore(restored)
    launch = len(_read_json(directory / CHAOS_FILE, {"kills": []})["kills"])
    chaos = trainer.rank == 0 and settings.chaos_kills
    kill_at = _planned_kill(settings, start, directory) if chaos else None
    log = open(directory / PROGRESS_FILE, "a") if trainer.rank == 0 else contextlib.nullcontext()
    run_step = step or trainer.step
    done, save_seconds = start, []
    with (
        deterministic_mode(enabled=settings.deterministic),
        log as progress,
        PreemptionHandler(notice_file=settings.notice_file) as preemption,
    ):
        while done < settings.steps:
            result = run_step(next_batch())
            done += 1
            time.sleep(settings.step_delay)
            if after_step is not None:
                after_step(done, result)
            if progress is not None:
                record = {"launch": launch, "step": done, "time": time.time()}
                progress.write(json.dumps(record) + "\n")
                progress.flush()
            if done == kill_at:
                _kill_self(directory, done)
            if settings.stop_after is not None and done - start >= settings.stop_after:
                return LoopResult(start, done, True, save_seconds, restored, launch)
            stop = preemption.should_stop(trainer.group)
            if stop or schedule.due(done, trainer.group) or done == settings.steps:
                extra = extra_state() if extra_state is not None else {}
                manager.save(trainer.capture_state(sampler, **extra))
                schedule.saved()
                save_seconds.append(manager.last_save_seconds)
            if stop:
                sys.exit(EXIT_PREEMPTED)
    return LoopResult(start, done, False, save_seconds, restored, launch)


def run_spot_training(config: SpotConfig, device: torch.device | None = None) -> dict:
    """Train from the newest checkpoint in ``config.checkpoint_dir`` to ``config.steps`` (§20.5.2).

    Every rank of the current process group (or a single process) calls it. Returns a summary with
    the final ``fingerprint`` (see :func:`chapter20.training.state.parameter_fingerprint`), the step
    it resumed from, and the checkpoint timings. Exits with :data:`EXIT_PREEMPTED` after saving when
    a preemption notice arrives.
    """
    _, world = group_rank_and_size()
    device = device or torch.device("cpu")
    anchors, positives = _training_pairs(config.vocab)
    set_seed(config.seed)
    model = BagOfEmbeddingsEncoder(config.vocab, config.dim).to(device)
    trainer = Trainer(model, config.train_config())
    sampler = ResumableBatchSampler(len(anchors), config.global_batch, seed=config.seed)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        idx = sampler.next_batch()
        batch_anchors = _drop_tokens(anchors[idx], config.token_dropout)
        return batch_anchors.to(device), positives[idx].to(device)

    run = resumable_loop(trainer, sampler, next_batch, config)
    if run.stopped:
        return {"stopped_at": run.steps, "resumed_from": run.resumed_from}
    return {
        "fingerprint": parameter_fingerprint(trainer.module),
        "resumed_from": run.resumed_from,
        "steps": run.steps,
        "world_size": world,
        "checkpoint_seconds": float(np.median(run.save_seconds)) if run.save_seconds else None,
        "config": asdict(config),
    }


def read_progress(directory: str | os.PathLike) -> list[dict]:
    """The (launch, step, time) records of a run's ``progress.jsonl`` (a line cut short by a
    kill is skipped), plus the recorded kills as ``{"kill": step, "time": t}`` entries."""
    directory = Path(directory)
    records = []
    path = directory / PROGRESS_FILE
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    for kill in _read_json(directory / CHAOS_FILE, {"kills": []})["kills"]:
        records.append({"kill": kill["step"], "time": kill["time"]})
    return sorted(records, key=lambda r: r["time"])


def start_spot_demo(args: list[str], *, nproc: int = 1, max_restarts: int = 0) -> subprocess.Popen:
    """Start ``scripts/spot_demo.py`` under ``torchrun`` with ``nproc`` processes and
    ``--max-restarts`` (§20.5.2) without waiting for it: torchrun's elastic agent restarts the
    whole group after a failure, which is what the demo's SIGKILLs are. Each launch rendezvouses
    on its own free port (``--standalone``), so several can run at once. Returns the process,
    its output captured as text."""
    nproc = check_int("nproc", nproc, 1)
    max_restarts = check_int("max_restarts", max_restarts, 0)
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        f"--max-restarts={max_restarts}",
        "--standalone",
        str(Path(__file__).parents[1] / "scripts" / "spot_demo.py"),
        *args,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // nproc))}
    return subprocess.Popen(
        command,
        cwd=repo_root() or Path.cwd(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_spot_demos(
    launches: dict[str, subprocess.Popen], *, timeout: float = 600.0
) -> dict[str, subprocess.CompletedProcess]:
    """Wait up to ``timeout`` seconds for each of the named :func:`start_spot_demo` launches
    (they run at the same time). If one times out, or anything else goes wrong, the launches
    still running are killed before the error is raised. Returns each finished process by name."""
    timeout = check_real("timeout", timeout, minimum=0, maximum=365 * 86400, exclusive=True)
    finished = {}
    try:
        for name, process in launches.items():
            stdout, stderr = process.communicate(timeout=timeout)
            finished[name] = subprocess.CompletedProcess(
                process.args, process.returncode, stdout, stderr
            )
    finally:
        for process in launches.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
    return finished


def launch_spot_demo(
    args: list[str],
    *,
    nproc: int = 1,
    max_restarts: int = 0,
    timeout: float = 600.0,
) -> subprocess.CompletedProcess:
    """Run ``scripts/spot_demo.py`` under ``torchrun`` (:func:`start_spot_demo`) and wait for
    it (:func:`wait_for_spot_demos`). Returns the finished process."""
    timeout = check_real("timeout", timeout, minimum=0, maximum=365 * 86400, exclusive=True)
    launch = start_spot_demo(args, nproc=nproc, max_restarts=max_restarts)
    return wait_for_spot_demos({"demo": launch}, timeout=timeout)["demo"]
