"""§20.4 Multi-GPU and multi-node: process groups, local groups, loaders, learning-rate scaling.

- :func:`init_distributed` / :func:`distributed` set up the process group from torchrun's
  environment (listing L10 done right: gloo on CPU, nccl on CUDA, a world of one without
  torchrun, a clear error for a misconfigured launch) and tear it down.
- :func:`is_main_process`, :func:`main_print`: rank 0 logs (§20.4 best practices).
- :func:`distributed_loader` / :func:`set_epoch`: listing L9 done right — a DistributedSampler
  that covers the data set exactly once per epoch and reshuffles each epoch.
- :func:`scale_lr` and :func:`warmup_schedule`: the linear scaling rule with warm-up (C14).
- :func:`run_local_group` runs a function on N local processes in one real group, so tests and
  notebooks exercise all of this on a laptop CPU; the same code runs under ``torchrun``;
  :func:`run_in_one_group` runs several experiments (:func:`jobs_on_rank`) in one group, started
  once.
- :func:`collective_device` / :func:`any_rank`: small agreement collectives (a flag, a count)
  on the device the group's backend reduces, so the same call works under gloo and nccl.

DDP's communication hooks (gradient compression, the overlap's bucket log) are
``chapter20.techniques.ddp_hooks``; all-reduces timed on a group,
``chapter20.techniques.allreduce_timing``.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import pickle
import queue as queue_module
import socket
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from chapter20.core.checks import check_int, check_real
from chapter20.core.device import dist_backend, get_device

__all__ = [
    "group_rank_and_size",
    "collective_device",
    "any_rank",
    "free_port",
    "preloaded_process_context",
    "run_local_group",
    "jobs_on_rank",
    "run_in_one_group",
    "DistributedContext",
    "init_distributed",
    "distributed",
    "is_main_process",
    "main_print",
    "distributed_loader",
    "set_epoch",
    "scale_lr",
    "warmup_schedule",
]


def group_rank_and_size(group: dist.ProcessGroup | None = None) -> tuple[int, int]:
    """``(rank, world_size)`` in ``group`` (§20.4); ``(0, 1)`` when no process group exists, so
    that distributed code runs unchanged as a world of one."""
    if not (dist.is_available() and dist.is_initialized()):
        if group is not None:
            raise ValueError("group was given but torch.distributed is not initialised")
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def collective_device(group: dist.ProcessGroup | None = None) -> torch.device:
    """The device whose tensors ``group``'s backend reduces (§20.4): the CPU for gloo (also when
    gloo serves CPU tensors beside nccl, ``"cpu:gloo,cuda:nccl"``), this process's current GPU
    for a group that only has nccl. A flag all-reduced on the wrong device fails under nccl on
    the first step of every multi-GPU run; build agreement tensors here."""
    backend = str(dist.get_backend(group)).lower()
    if "gloo" in backend or "mpi" in backend or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def any_rank(flag: bool, group: dist.ProcessGroup | None = None) -> bool:
    """True on every rank of ``group`` if ``flag`` is true on any (a MAX all-reduce on
    :func:`collective_device`); ``flag`` itself in a world of one (§20.4). Every rank calls it,
    so a decision one rank takes (stop, save, an error) is taken by all and none is left waiting
    in a collective the others skip."""
    if group_rank_and_size(group)[1] == 1:
        return bool(flag)
    box = torch.tensor([int(bool(flag))], device=collective_device(group))
    dist.all_reduce(box, op=dist.ReduceOp.MAX, group=group)
    return bool(box.item())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a local rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# What every rank imports, once, in the fork server: torch._dynamo since any torch optimizer does;
# pandas and the plots since the notebooks' experiments that ranks run (chapter20.labs) do.
_RANK_PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "chapter20.training.trainer",
                 "pandas", "chapter20.core.plotting")  # fmt: skip


@contextlib.contextmanager
def _environment(environment: dict[str, str]):
    """``os.environ`` is ``environment`` inside the block and as before after it."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(environment)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def preloaded_process_context():
    """A multiprocessing context whose processes start fast: ``forkserver`` preloaded with
    :data:`_RANK_PRELOAD` where the platform has it, else ``spawn``; never a fork of a parent
    that may hold threads or a CUDA context. :func:`run_local_group`'s ranks start from it."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(list(_RANK_PRELOAD))  # read when the server first starts
    return context


def _worker(
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout_s: float,
    fn: Callable[..., Any],
    args: tuple,
    results: Any,
    environment: dict[str, str],
) -> None:
    # The fork server's environment is the one it started with: take the caller's, as now.
    os.environ.clear()
    os.environ.update(environment)
    # Share the machine's cores between the ranks instead of oversubscribing them.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    try:
        options = {}
        if "nccl" in backend:
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
            options["device_id"] = device
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
            **options,
        )
        try:
            value = fn(*args)
        finally:
            gc.collect()  # free DDP reducers and pending works before their group goes
            dist.destroy_process_group()
        results.put((rank, True, pickle.dumps(value)))
    except BaseException:  # report any failure to the parent instead of hanging it
        results.put((rank, False, traceback.format_exc()))


def run_local_group(
    fn: Callable[..., Any],
    world_size: int,
    args: tuple = (),
    *,
    backend: str | None = None,
    timeout_s: float = 120.0,
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` local processes in one process group (§20.4).

    Each process joins a real group through a TCP rendezvous on 127.0.0.1, calls ``fn`` and
    returns its (picklable) value; the list of values comes back in rank order. ``backend``
    defaults to gloo; with CUDA and a GPU for every rank, to ``"cpu:gloo,cuda:nccl"`` (rank r
    on GPU r), so CPU tensors still reduce. ``fn`` must be importable (a module-level
    function), as with any spawned process. Ranks start from a fork server that has already
    imported torch (``spawn`` where the platform has no fork server), with the caller's
    environment variables. If a rank raises, the others are stopped and a
    RuntimeError carries that rank's traceback; if the group is not done within ``timeout_s``
    seconds, a TimeoutError.
    """
    world_size = check_int("world_size", world_size, 1)
    timeout_s = _check_timeout(timeout_s)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if backend is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        backend = _group_backend(torch.device("cuda")) if 0 < world_size <= gpus else "gloo"
    elif "nccl" in backend and world_size > torch.cuda.device_count():
        raise ValueError(
            f"backend {backend!r} needs one GPU per rank: world_size={world_size}, "
            f"GPUs={torch.cuda.device_count()}"
        )
    # Ranks log C++ warnings (gloo's notices, DDP's hints) from ERROR up unless the caller chose.
    environment = {"TORCH_CPP_LOG_LEVEL": "ERROR", **os.environ}  # read as a rank's torch starts
    context = preloaded_process_context()
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=_worker,
            args=(rank, world_size, port, backend, timeout_s, fn, args, results, environment),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    with _environment(environment):
        for process in processes:
            process.start()
    values: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < world_size:
            try:
                rank, ok, payload = results.get(timeout=0.2)
            except queue_module.Empty:
                dead = [p for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"a rank of the local group exited with code {dead[0].exitcode} "
                        "without reporting a result"
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the local group of {world_size} did not finish in {timeout_s:g} s"
                    ) from None
                continue
            if not ok:
                raise RuntimeError(f"rank {rank} of {world_size} failed:\n{payload}")
            values[rank] = pickle.loads(payload)
    finally:
        for process in processes:
            process.join(timeout=5 if len(values) == world_size else 0.1)
            if process.is_alive():
                process.terminate()
                process.join()
    return [values[rank] for rank in range(world_size)]


def jobs_on_rank(jobs: dict) -> dict:
    """On every rank of a group: each ``(function, args)`` of ``jobs`` in order (§20.4); returns
    ``{name: result}``."""
    return {name: function(*args) for name, (function, args) in jobs.items()}


def run_in_one_group(world: int, jobs: dict, *, timeout_s: float = 120.0) -> list[dict]:
    """§20.4 several experiments on one local gloo group of ``world`` ranks, started once (a
    group costs seconds to start): ``jobs`` maps a name to ``(fn, args)``, where ``fn`` is a
    module-level ``*_on_rank`` function; each rank runs them in order (:func:`jobs_on_rank`).
    Returns, in rank order, each rank's ``{name: fn(*args)}``; ``timeout_s`` as
    :func:`run_local_group`."""
    world = check_int("world", world, 1)
    if not isinstance(jobs, dict) or not all(callable(job[0]) for job in jobs.values()):
        raise TypeError("jobs must map names to (function, args) pairs")
    return run_local_group(jobs_on_rank, world, (jobs,), timeout_s=timeout_s)


# --------------------------------------------------------------------------------------------
# Launch: torchrun's environment → a process group
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistributedContext:
    """Where this process stands: rank, world size, local rank, device, backend, and whether
    :func:`init_distributed` created the process group (and must destroy it)."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None
    created_group: bool

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        message = f"environment variable {name} must be an integer, got {value!r}"
        raise RuntimeError(message) from None


def init_distributed(*, backend: str | None = None, timeout_s: float = 300.0) -> DistributedContext:
    """Join the process group that ``torchrun`` (or SLURM + torchrun) describes (§20.4.2).

    Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Without them (plain
    ``python script.py``) this is a world of one and no group is created. On CPU the backend is
    gloo. With CUDA, local rank r drives GPU r (a clear error if a node runs more processes than
    it has GPUs, instead of two ranks silently sharing one), and the group is
    ``"cpu:gloo,cuda:nccl"``: nccl for CUDA tensors, gloo for the CPU tensors that object
    collectives and small agreements reduce; ``device_id`` binds the group to the GPU. A launch
    that cannot work raises RuntimeError saying which variable to set. An existing group is
    reused.

    torchrun's workers share one key-value store across elastic restarts, and keys a previous
    attempt left there (its ranks' addresses) must not be read as current. The key prefix of
    this attempt comes from a handshake through that store (see :func:`_attempt_namespace`), so
    every rank agrees on it even when their agents count restarts differently, as they do
    after a spot node is replaced.
    """
    timeout_s = _check_timeout(timeout_s)
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local = _env_int("LOCAL_RANK", 0)
        return DistributedContext(rank, world, local, _device_for(local), dist.get_backend(), False)
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise RuntimeError(
            f"RANK={rank} and WORLD_SIZE={world} do not fit: need WORLD_SIZE >= 1 and "
            "0 <= RANK < WORLD_SIZE (launch with torchrun, which sets both)"
        )
    device = _device_for(local)
    if world == 1:
        return DistributedContext(0, 1, local, device, None, False)
    missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={world} but {' and '.join(missing)} not set: every rank must know where "
            "rank 0 listens (torchrun sets them; across nodes pass --master_addr=<node 0 host> "
            "--master_port=<free port>)"
        )
    backend = backend or _group_backend(device)
    options = {}
    if device.type == "cuda":
        torch.cuda.set_device(device)
        options["device_id"] = device
    timeout = timedelta(seconds=timeout_s)
    store, _, _ = next(dist.rendezvous("env://", rank=rank, world_size=world, timeout=timeout))
    namespace = _attempt_namespace(store, rank, world, timeout_s)
    store = dist.PrefixStore(f"chapter20/{namespace}", store)
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world, timeout=timeout, **options
    )
    return DistributedContext(rank, world, local, device, backend, True)


def _check_timeout(timeout_s: float) -> float:
    """A timeout in seconds: > 0 and at most a year (a timedelta, and C's clocks, hold no more)."""
    return check_real("timeout_s", timeout_s, minimum=0, maximum=365 * 86400, exclusive=True)


def _group_backend(device: torch.device) -> str:
    """nccl for CUDA tensors with gloo beside it for CPU ones; gloo alone elsewhere."""
    return "cpu:gloo,cuda:nccl" if device.type == "cuda" else dist_backend(device)


def _device_for(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        if not 0 <= local_rank < count:
            raise RuntimeError(
                f"LOCAL_RANK={local_rank} but this node has {count} GPU(s): two processes would "
                f"share a GPU. Start at most {count} process(es) per node "
                f"(torchrun --nproc_per_node={count}), or hide the GPUs "
                "(CUDA_VISIBLE_DEVICES=) to run every process on the CPU"
            )
        return torch.device("cuda", local_rank)
    return get_device()


def _attempt_namespace(store: dist.Store, rank: int, world_size: int, timeout_s: float) -> str:
    """A key prefix that every rank of this launch agrees on and no earlier launch used.

    Rank 0 draws a fresh random name. Every other rank posts a fresh random ticket under
    ``hello/<rank>`` and waits for the key ``welcome/<its ticket>``: no earlier launch can have
    written that key, so what it reads is current. Rank 0 answers every ticket it sees (a stale
    ticket of a dead attempt gets an answer nobody reads) until each rank has confirmed under
    the fresh name. Nothing depends on a per-agent restart counter, which agents disagree on
    when a spot node was replaced (the new agent counts from 0).
    """
    deadline = time.monotonic() + timeout_s
    if rank != 0:
        ticket = uuid.uuid4().hex
        store.set(f"chapter20/hello/{rank}", ticket)
        store.wait([f"chapter20/welcome/{ticket}"], timedelta(seconds=timeout_s))
        namespace = store.get(f"chapter20/welcome/{ticket}").decode()
        store.set(f"chapter20/{namespace}/joined/{rank}", b"1")
        return namespace
    namespace = f"attempt-{uuid.uuid4().hex}"
    answered: set[bytes] = set()
    waiting = set(range(1, world_size))
    while waiting:
        for peer in sorted(waiting):
            if store.check([f"chapter20/{namespace}/joined/{peer}"]):
                waiting.discard(peer)
            elif store.check([f"chapter20/hello/{peer}"]):
                ticket = store.get(f"chapter20/hello/{peer}")
                if ticket not in answered:
                    store.set(f"chapter20/welcome/{ticket.decode()}", namespace.encode())
                    answered.add(ticket)
        if waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"ranks {sorted(waiting)} did not join within {timeout_s:g} s")
            time.sleep(0.005)
    return namespace


@contextlib.contextmanager
def distributed(**kwargs):
    """``with distributed() as ctx:`` — :func:`init_distributed`, then the process group is
    destroyed on exit (also after an error) if this call created it."""
    ctx = init_distributed(**kwargs)
    try:
        yield ctx
    finally:
        if ctx.created_group and dist.is_initialized():
            dist.destroy_process_group()


def is_main_process() -> bool:
    """True on rank 0 (and in a world of one)."""
    return group_rank_and_size()[0] == 0


def main_print(*args, **kwargs) -> None:
    """``print`` on rank 0 only: one log, not W interleaved copies."""
    if is_main_process():
        print(*args, **kwargs)


# --------------------------------------------------------------------------------------------
# Data: each rank its share, every example once per epoch
# --------------------------------------------------------------------------------------------


def distributed_loader(
    dataset: torch.utils.data.Dataset,
    batch_size: int,
    *,
    shuffle: bool = True,
    seed: int = 0,
    drop_last: bool = True,
    num_workers: int = 0,
    pin_memory: bool | None = None,
) -> torch.utils.data.DataLoader:
    """A DataLoader over this rank's share of ``dataset`` (§20.4.1, listing L9 done right).

    ``batch_size`` is per rank. A ``DistributedSampler`` deals the (seeded) permutation out
    round-robin, so at every step the ranks' batches together are one global batch of a single
    process with ``batch_size × W`` rows. ``drop_last=True`` (the default) drops the incomplete
    tail, so no rank pads with repeated examples and no short batch spikes a contrastive loss;
    with ``drop_last=False`` the sampler pads by repeating examples. Call :func:`set_epoch`
    before each epoch to reshuffle. Pinned memory only helps copies to a GPU (default: on with
    CUDA); workers help when loading is slow (tensors in memory need none).
    """
    rank, world = group_rank_and_size()
    batch_size = check_int("batch_size", batch_size, 1)
    seed = check_int("seed", seed, 0)
    sampler = torch.utils.data.DistributedSampler(
        dataset, num_replicas=world, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
    )
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=drop_last,
        num_workers=check_int("num_workers", num_workers, 0),
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        persistent_workers=num_workers > 0,
    )


def set_epoch(loader: torch.utils.data.DataLoader, epoch: int) -> None:
    """Tell the loader's DistributedSampler the epoch: without it every epoch repeats the same
    order (listing L9 forgets this)."""
    sampler = loader.sampler
    if not isinstance(sampler, torch.utils.data.DistributedSampler):
        raise TypeError("loader must use a DistributedSampler (see distributed_loader)")
    sampler.set_epoch(check_int("epoch", epoch, 0))


# --------------------------------------------------------------------------------------------
# Learning rate
# --------------------------------------------------------------------------------------------


def scale_lr(base_lr: float, base_batch: int, batch: int, *, rule: str = "linear") -> float:
    """Linear scaling rule (§20.4.1, claim C14): the learning rate grows with the global batch,
    ``base_lr × batch / base_batch`` (batch 512 at 1e-3 → batch 4096 at 8e-3). Use it with a
    warm-up (:func:`warmup_schedule`): early updates at the full scaled rate diverge.
    ``rule="sqrt"``: ``base_lr × sqrt(batch / base_batch)``, the milder rule often used for
    Adam, whose update size does not grow with the gradient's."""
    base_lr = check_real("base_lr", base_lr, finite=True)
    if base_lr <= 0:
        raise ValueError(f"base_lr must be > 0, got {base_lr}")
    if rule not in ("linear", "sqrt"):
        raise ValueError(f"rule must be 'linear' or 'sqrt', got {rule!r}")
    ratio = check_int("batch", batch, 1) / check_int("base_batch", base_batch, 1)
    return base_lr * (ratio if rule == "linear" else math.sqrt(ratio))


def warmup_schedule(
    optimizer: torch.optim.Optimizer, warmup_steps: int, *, total_steps: int | None = None
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 1/``warmup_steps`` of the rate to the full rate over
    ``warmup_steps`` steps (0: none), then constant — or, with ``total_steps``, a cosine decay
    that reaches 0 at ``total_steps`` (§20.4.1). Every parameter group follows it. Call
    ``scheduler.step()`` after each optimizer step."""
    warmup_steps = check_int("warmup_steps", warmup_steps, 0)
    if total_steps is not None:
        total_steps = check_int("total_steps", total_steps, 1)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if total_steps is None:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
