"""§20.6 One training step that composes every technique of the chapter.

The sections prove their techniques one at a time; a real run uses them together. A
:class:`Trainer` is built from a :class:`TrainConfig` and an encoder, and its
:meth:`Trainer.step` clears the gradients, runs forward and backward under the configured
precision, accumulates or caches, unscales, clips, steps the optimizer and the schedule, and
returns one :class:`StepResult` — for every combination of:

- **precision** (§20.2.2): fp32, bf16 autocast, or fp16 autocast with a ``GradScaler`` (the
  gradients unscaled before clipping; a step with inf/NaN gradients skipped and counted, in
  every precision);
- **a bigger batch than fits** (§20.2.1), by one of two rules, enforced:
  *exact accumulation* over micro-batches for a loss that is a mean over examples (each
  example weighted by 1 / examples in the whole step, counted over all ranks; ``no_sync`` on
  all micro-batches but the last), or *gradient caching* for the contrastive loss, whose
  examples are each other's negatives, so that splitting the batch into micro-batches would
  change the loss (chunks of ``chunk_size`` rows, the RNG replayed);
- **cross-rank negatives** (§20.1): InfoNCE against the keys of every rank, hard negatives,
  and a learnable temperature that is a parameter of the module DDP wraps, so its gradient is
  averaged like every other;
- **activation checkpointing** (§20.3.1) with any policy of
  ``chapter20.techniques.activation_checkpointing``;
- **any optimizer** of ``chapter20.techniques.optimizers`` (§20.3.2), 8-bit state with 32-bit
  state for embedding tables, a linear warm-up and an optional cosine decay, gradient clipping;
- **data parallelism with a sharded table** (§20.1, §20.4): the module is wrapped in DDP when
  the group has more than one rank, its gradient all-reduce sent in the configured precision by
  a communication hook that counts the bytes (:attr:`Trainer.communication`); the rows of a
  ``ShardedEmbedding`` (``per_rank`` inputs) are kept out of DDP, and their gradient, which
  arrives summed over the ranks, is divided by the world size, so W ranks make exactly the
  single-process update. The gradient norm that clipping and the skip test use counts every
  rank's rows;
- **the learning rate of the run's batch** (§20.4.1): ``lr`` at ``base_batch``, scaled linearly
  to the run's global batch (``TrainConfig.peak_lr``), reached after the warm-up;
- **ZeRO stage 1** (§20.3.2): the optimizer's state sharded over the ranks
  (``ZeroRedundancyOptimizer`` around the configured kind, the same update).

The trainer owns what it does to the model: ``TrainConfig.sharded_table`` replaces the encoder's
``nn.Embedding`` tables by sharded ones (``ShardedEmbedding``) and
``TrainConfig.activation_checkpointing`` regroups its layers, both when the trainer is built;
:meth:`Trainer.plain_model` is the one way back, a copy with every such change undone (the
tables gathered), e.g. for an encoder file.
:meth:`Trainer.capture_state` / :meth:`Trainer.restore_state` hand the whole training state to
``chapter20.training.checkpoints.CheckpointManager`` (§20.5.2), and :func:`step_peak_memory`
measures one step. The one loop around the step is ``chapter20.training.loop`` (the resumable
loop), which ``chapter20.training.driver`` runs for every application.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from chapter20.core.checks import check_positive
from chapter20.core.measure import peak_memory
from chapter20.techniques.accumulation import num_examples, split_batch
from chapter20.techniques.activation_checkpointing import apply_checkpointing, undo_checkpointing
from chapter20.techniques.contrastive import (
    distributed_info_nce,
    grad_cache_backward,
    info_nce,
)
from chapter20.techniques.ddp_hooks import CompressionStats, compress_gradients
from chapter20.techniques.distributed import group_rank_and_size, warmup_schedule
from chapter20.techniques.optimizers import make_optimizer
from chapter20.techniques.precision import PRECISIONS, autocast, resolve_precision
from chapter20.techniques.sharding import ShardedEmbedding, data_parallel_ignored_names
from chapter20.techniques.zero import zero_redundancy
from chapter20.training.config import TrainConfig
from chapter20.training.state import capture_state, restore_state

__all__ = [
    "StepResult",
    "TrainedModule",
    "Trainer",
    "step_peak_memory",
]


@dataclass(frozen=True)
class StepResult:
    """One optimizer step (§20.6): ``loss`` is the mean loss of the whole step's batch over
    every rank (the same on every rank), ``examples`` the examples in it, ``grad_norm`` the
    total gradient norm before clipping (every rank's table rows counted), ``skipped`` whether
    the update was skipped (inf/NaN gradients), ``scale`` the fp16 loss scale used (1.0
    otherwise), ``lr`` the learning rate of the first parameter group for this step."""

    loss: float
    examples: int
    grad_norm: float
    skipped: bool
    scale: float
    lr: float


class TrainedModule(nn.Module):
    """What the trainer trains, and what DDP wraps (§20.6): the encoder and, when the
    contrastive loss learns its temperature, the temperature's log as a parameter — inside the
    wrapped module, so DDP averages its gradient like every other (kept outside, each rank's
    temperature would drift on its own). Its forward is the encoder's; its state dict is the
    checkpoint's model state."""

    def __init__(self, encoder: nn.Module, learned_temperature: float | None = None):
        super().__init__()
        self.encoder = encoder
        self.log_temperature = None
        if learned_temperature is not None:
            learned_temperature = check_positive("learned_temperature", learned_temperature)
            start = torch.tensor(math.log(learned_temperature), device=_device_of(encoder))
            self.log_temperature = nn.Parameter(start)

    def forward(self, *args, **kwargs):
        return self.encoder(*args, **kwargs)


def _device_of(module: nn.Module) -> torch.device:
    for tensor in module.parameters():
        return tensor.device
    return torch.device("cpu")


class Trainer:
    """The composed training step (§20.6): see the module docstring and :class:`TrainConfig`.

    ``encoder`` is the plain model (not wrapped in DDP). ``loss=None`` trains it contrastively:
    a batch is ``(anchors, positives)`` or ``(anchors, positives, hard_negatives)``, each
    encoded by the same encoder, with InfoNCE. Otherwise ``loss(model, batch)`` returns one loss
    per example (shape ``[n]``) and the step minimises their mean; a ``list`` passed to
    :meth:`step` is taken as the micro-batches themselves, anything else is split into
    ``config.micro_batches``. ``optimizer`` / ``scheduler`` default to the config's; give your
    own to compare. ``group`` is the process group (default: the default group, or none).

    Every rank of the group calls :meth:`step` together with its own part of the global batch.
    """

    def __init__(
        self,
        encoder: nn.Module,
        config: TrainConfig | None = None,
        *,
        loss: Callable[[nn.Module, Any], torch.Tensor] | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        group: dist.ProcessGroup | None = None,
    ):
        config = TrainConfig() if config is None else config
        if not isinstance(config, TrainConfig):
            raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
        if not isinstance(encoder, nn.Module):
            raise TypeError(f"encoder must be an nn.Module, got {type(encoder).__name__}")
        if isinstance(encoder, nn.parallel.DistributedDataParallel):
            raise TypeError("pass the plain encoder: the trainer wraps it in DDP itself")
        if loss is not None and not callable(loss):
            raise TypeError(f"loss must be None (InfoNCE) or callable, got {type(loss).__name__}")
        self.contrastive = loss is None
        if self.contrastive and config.micro_batches > 1:
            raise ValueError(
                "micro_batches > 1 splits InfoNCE's negatives (each micro-batch would see only "
                "its own): use chunk_size (gradient caching) for the contrastive loss"
            )
        if not self.contrastive and config.chunk_size is not None:
            raise ValueError(
                "chunk_size (gradient caching) needs the contrastive loss; a per-example loss "
                "accumulates exactly over micro_batches"
            )
        if not self.contrastive and config.learn_temperature:
            raise ValueError("learn_temperature needs the contrastive loss (loss=None)")
        self.config = config
        self.loss_fn = loss
        self.group = group
        self.rank, self.world_size = group_rank_and_size(group)
        self.device = _device_of(encoder)
        self.dtype = resolve_precision(config.precision, self.device)
        self._sharded_tables = _shard_tables(encoder, group) if config.sharded_table else []
        if config.activation_checkpointing != "none":
            apply_checkpointing(
                encoder, config.activation_checkpointing, k=config.activation_checkpointing_k
            )
        learned = config.temperature if config.learn_temperature else None
        self.module = TrainedModule(encoder, learned)
        self.tables = [m for m in encoder.modules() if _is_table(m)]
        self.sharded = [
            p for m in encoder.modules() if isinstance(m, ShardedEmbedding) for p in m.parameters()
        ]
        #: The bytes the gradient all-reduce sent (DDP's communication hook); None with one rank.
        self.communication: CompressionStats | None = None
        self.model = self._wrap(self.module)
        self.optimizer = optimizer if optimizer is not None else self._make_optimizer()
        self.scheduler = scheduler if scheduler is not None else self._make_scheduler()
        self._check_given(optimizer, scheduler)
        self.scaler = self._make_scaler()
        self.steps = 0
        self.skipped_steps = 0

    # -- construction -----------------------------------------------------------------------

    def _wrap(self, module: TrainedModule) -> nn.Module:
        if self.world_size == 1:
            return module
        ignored = data_parallel_ignored_names(module, self.group)
        nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
            module, ignored
        )
        device_ids = [self.device] if self.device.type == "cuda" else None
        wrapped = nn.parallel.DistributedDataParallel(
            module, device_ids=device_ids, process_group=self.group
        )
        self.communication = compress_gradients(wrapped, self.config.gradient_compression)
        return wrapped

    def _check_given(self, optimizer, scheduler) -> None:
        """An optimizer or schedule passed in must drive what this trainer trains."""
        if optimizer is not None:
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {optimizer!r}")
            held = {id(p) for group in optimizer.param_groups for p in group["params"]}
            missing = [n for n, p in self.module.named_parameters() if id(p) not in held]
            if missing:
                raise ValueError(f"optimizer does not hold {', '.join(missing[:3])}")
        if scheduler is not None and scheduler.optimizer is not self.optimizer:
            raise ValueError("scheduler must schedule this trainer's optimizer")

    def _make_optimizer(self) -> torch.optim.Optimizer:
        config = self.config
        groups = [{"params": list(self.module.encoder.parameters())}]
        if config.learn_temperature:  # never decayed: it is a scale, not a weight
            groups.append({"params": [self.module.log_temperature], "weight_decay": 0.0})
        tables = self.tables if config.state_32bit_tables and "8bit" in config.optimizer else []
        optimizer = make_optimizer(
            groups,
            config.optimizer,
            config.peak_lr,
            weight_decay=config.weight_decay,
            state_32bit=tables,
        )
        if config.zero1 and self.world_size > 1:
            return zero_redundancy(optimizer, self.group)
        return optimizer

    def _make_scheduler(self) -> torch.optim.lr_scheduler.LambdaLR:
        total = self.config.total_steps if self.config.schedule == "cosine" else None
        if self.config.schedule == "cosine" and total is None:
            raise ValueError(
                "schedule 'cosine' needs total_steps (the step where the rate is 0): give it, or "
                "build the step from a run's configuration (TrainConfig.for_run)"
            )
        return warmup_schedule(self.optimizer, self.config.warmup_steps, total_steps=total)

    def _make_scaler(self) -> torch.amp.GradScaler | None:
        if self.dtype != torch.float16:
            return None
        if self.sharded and self.world_size > 1:
            # Each rank holds other table rows, so one rank may see an inf the others do not:
            # this scaler agrees on "found inf" across the group, so all ranks skip together.
            # (Imported here: torch.distributed.fsdp costs seconds at every process start.)
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            return ShardedGradScaler(
                self.device.type, init_scale=self.config.init_scale, process_group=self.group
            )
        return torch.amp.GradScaler(self.device.type, init_scale=self.config.init_scale)

    # -- properties -------------------------------------------------------------------------

    @property
    def encoder(self) -> nn.Module:
        """The plain encoder being trained (not wrapped)."""
        return self.module.encoder

    def plain_model(self) -> nn.Module:
        """A copy of the encoder as it was before this trainer changed it, with the trained
        values (§20.6): every table that ``config.sharded_table`` sharded gathered into an
        ``nn.Embedding`` (a collective with more than one rank: every rank calls it),
        ``config.activation_checkpointing`` undone; the same parameter names and order as the
        encoder given to the trainer, on the trainer's device. The trainer is not changed."""
        replaced: dict[int, Any] = {}
        for name in self._sharded_tables:
            table = self.encoder.get_submodule(name)
            replaced[id(table)] = nn.Embedding.from_pretrained(table.full_weight(), freeze=False)
        for module in self.encoder.modules():  # a process group is shared, never copied
            if isinstance(module, ShardedEmbedding) and module.group is not None:
                replaced[id(module.group)] = module.group
        plain = copy.deepcopy(self.encoder, replaced)
        if self.config.activation_checkpointing != "none":
            undo_checkpointing(plain)
        return plain

    @property
    def precision(self) -> str:
        """The precision this trainer resolved: "fp32", "bf16" or "fp16"."""
        return next(name for name, dtype in PRECISIONS.items() if dtype == self.dtype)

    def autocast(self):
        """The autocast context of the forward passes (a null context in fp32)."""
        return autocast(self.dtype, self.device)

    # -- the step ---------------------------------------------------------------------------

    def step(self, batch: Any) -> StepResult:
        """One optimizer step on this rank's part of the batch (§20.6); every rank calls it."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        if self.contrastive:
            loss, examples = self._contrastive_backward(batch)
        else:
            loss, examples = self._accumulated_backward(batch)
        lr = float(self.optimizer.param_groups[0]["lr"])
        for table in self.sharded if self.world_size > 1 else ():
            if table.grad is not None:  # summed over ranks by the all-to-all; DDP averages the rest
                table.grad.div_(self.world_size)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = self._grad_norm()
        grad_norm = float(norm)
        skipped = not math.isfinite(grad_norm)
        if self.config.clip_norm is not None and not skipped:
            torch.nn.utils.clip_grads_with_norm_(self._parameters(), self.config.clip_norm, norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skips the update if a gradient is inf/NaN
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale
        elif not skipped:
            self.optimizer.step()
        if not skipped:
            self.scheduler.step()
        self.steps += 1
        self.skipped_steps += skipped
        return StepResult(loss, examples, grad_norm, skipped, scale, lr)

    def _parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.grad is not None]

    def _grad_norm(self) -> torch.Tensor:
        """The 2-norm of every gradient (what ``clip_grad_norm_`` computes), with the table rows
        of every rank counted once under a sharded table."""
        grads = [p.grad for p in self._parameters()]
        if not (self.sharded and self.world_size > 1):
            return torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
        sharded = {id(p) for p in self.sharded}
        parts = [
            [p.grad for p in self._parameters() if id(p) not in sharded],
            [p.grad for p in self.sharded if p.grad is not None],
        ]
        squares = torch.stack(
            [
                torch.nn.utils.get_total_norm(g).double() ** 2
                if g
                else torch.zeros((), dtype=torch.float64)
                for g in parts
            ]
        ).to(self.device)
        dist.all_reduce(squares[1:], group=self.group)  # each rank holds other rows
        return squares.sum().sqrt().float()

    def _backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def _sum_over_ranks(self, *values: float) -> list[float]:
        if self.world_size == 1:
            return list(values)
        box = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(box, group=self.group)
        return box.tolist()

    def _agree_on_forwards(self, forwards: int) -> None:
        """Under a sharded table each forward pass is an all-to-all: every rank must run as
        many (micro-batches or chunks) in a step, or the collectives would pair up wrongly."""
        if not (self.sharded and self.world_size > 1):
            return
        box = torch.tensor([forwards, -forwards], device=self.device)
        dist.all_reduce(box, op=dist.ReduceOp.MAX, group=self.group)
        if int(box[0]) != -int(box[1]):
            raise ValueError(
                "with a sharded table every rank must run as many forward passes per step "
                f"(micro-batches or chunks): got between {-int(box[1])} and {int(box[0])}"
            )

    # -- accumulation: a mean over examples, exact for any split -----------------------------

    def _accumulated_backward(self, batch: Any) -> tuple[float, int]:
        if isinstance(batch, list):
            micro_batches = batch
        else:
            micro_batches = split_batch(batch, self.config.micro_batches)
        if not micro_batches:
            raise ValueError("batch must hold at least one micro-batch")
        counts = [num_examples(m) for m in micro_batches]
        self._agree_on_forwards(len(micro_batches))
        (total,) = self._sum_over_ranks(sum(counts))
        if total == 0:
            raise ValueError("the batch holds no example on any rank")
        # DDP averages over W ranks: weigh each example by W / (examples of all ranks).
        weight = self.world_size / total
        loss_sum = 0.0
        for index, (micro, count) in enumerate(zip(micro_batches, counts)):
            with self._sync(last=index == len(micro_batches) - 1):
                with self.autocast():
                    losses = self.loss_fn(self.model, micro)
                if not isinstance(losses, torch.Tensor) or losses.shape != (count,):
                    got = tuple(losses.shape) if isinstance(losses, torch.Tensor) else losses
                    raise ValueError(
                        f"loss must return one loss per example, shape ({count},), got {got!r} "
                        f"for micro-batch {index}"
                    )
                self._backward(losses.float().sum() * weight)
            loss_sum += float(losses.detach().float().sum())
        (loss_sum,) = self._sum_over_ranks(loss_sum)
        return loss_sum / total, int(total)

    def _sync(self, last: bool):
        if last or self.world_size == 1:
            return contextlib.nullcontext()
        return self.model.no_sync()

    # -- the contrastive loss: whole batch, or gradient caching -----------------------------

    @property
    def temperature(self) -> float:
        """The contrastive loss's temperature now (learned or fixed)."""
        learned = self.module.log_temperature
        return self.config.temperature if learned is None else float(learned.detach().exp())

    def _info_nce(self, queries, keys, *rest) -> torch.Tensor:
        """InfoNCE of this config on ``(queries, keys[, hard_negatives][, log_temperature])``:
        the learned temperature comes last, as a loss parameter."""
        learned = self.module.log_temperature is not None
        hard = rest[:-1] if learned else rest
        hard_negatives = hard[0] if hard else None
        temperature = rest[-1].exp() if learned else self.config.temperature
        if self.config.cross_rank_negatives and self.world_size > 1:
            return distributed_info_nce(
                queries,
                keys,
                temperature,
                symmetric=self.config.symmetric,
                hard_negatives=hard_negatives,
                group=self.group,
            )
        return info_nce(
            queries,
            keys,
            temperature,
            symmetric=self.config.symmetric,
            hard_negatives=hard_negatives,
        )

    def _towers(self, batch: Any) -> tuple[torch.Tensor, ...]:
        if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
            raise ValueError(
                "a contrastive batch is (anchors, positives) or (anchors, positives, "
                f"hard_negatives), got {type(batch).__name__}"
                + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
            )
        if batch[0].shape[0] != batch[1].shape[0]:
            raise ValueError(
                f"anchors and positives must hold the same number of rows, got "
                f"{batch[0].shape[0]} and {batch[1].shape[0]}"
            )
        return tuple(batch)

    def _contrastive_backward(self, batch: Any) -> tuple[float, int]:
        towers = self._towers(batch)
        learned = () if self.module.log_temperature is None else (self.module.log_temperature,)
        chunk = self.config.chunk_size
        if chunk is None:
            self._agree_on_forwards(len(towers))
            with self.autocast():
                representations = [self.model(x) for x in towers]
            loss = self._info_nce(*representations, *learned)
            self._backward(loss)
        else:
            self._agree_on_forwards(sum(math.ceil(x.shape[0] / chunk) for x in towers))
            loss = grad_cache_backward(
                self.model,
                towers,
                self._info_nce,
                chunk,
                forward_context=self.autocast,
                loss_parameters=learned,
                scale_loss=self.scaler.scale if self.scaler is not None else None,
            )
        # Each rank's loss is scaled so that the mean over ranks is the global batch's loss.
        loss_sum, pairs = self._sum_over_ranks(float(loss.detach()), towers[0].shape[0])
        return loss_sum / self.world_size, int(pairs)

    # -- state for checkpoints.CheckpointManager ---------------------------------------------

    def capture_state(self, sampler: Any = None, **extra: Any) -> dict[str, Any]:
        """The full training state after :attr:`steps` steps, for
        ``chapter20.training.checkpoints.CheckpointManager.save`` (§20.5.2): model (with the
        temperature), optimizer, schedule, loss scaler, the sampler's position, every rank's RNG
        states.
        A collective under DDP: every rank calls it."""
        parts = self._state_parts(sampler)
        return capture_state(self.steps, **parts, skipped_steps=self.skipped_steps, **extra)

    def _state_parts(self, sampler: Any) -> dict[str, Any]:
        """What the training state is captured from and restored into."""
        return {"model": self.module, "optimizer": self.optimizer, "scheduler": self.scheduler,
                "scaler": self.scaler, "sampler": sampler, "group": self.group}  # fmt: skip

    def restore_state(self, state: dict[str, Any], sampler: Any = None) -> int:
        """Load what :meth:`capture_state` saved; returns (and continues from) its step."""
        self.steps = restore_state(state, **self._state_parts(sampler))
        self.skipped_steps = int(state["extra"].get("skipped_steps", 0))
        return self.steps


def _shard_tables(encoder: nn.Module, group: dist.ProcessGroup | None) -> list[str]:
    """Replace each ``nn.Embedding`` of ``encoder`` by a ``ShardedEmbedding`` holding the same
    rows, each rank looking up its own ids (``inputs="per_rank"``: row-wise sharding beside
    DDP, §20.1); the names of the replaced tables. Parameter order is kept."""
    names = [name for name, m in encoder.named_modules() if type(m) is nn.Embedding]
    if not names or "" in names:
        raise ValueError(
            "sharded_table needs an encoder holding nn.Embedding tables, got "
            f"{type(encoder).__name__}"
        )
    for name in names:  # every table checked before any is replaced
        table = encoder.get_submodule(name)
        if table.padding_idx is not None or table.max_norm is not None or table.sparse:
            raise ValueError(
                f"sharded_table: the table {name!r} has padding_idx, max_norm or sparse set, "
                "which a ShardedEmbedding does not reproduce"
            )
    for name in names:
        table = encoder.get_submodule(name)
        parent, _, child = name.rpartition(".")
        sharded = ShardedEmbedding.from_full_weight(
            table.weight.detach(), inputs="per_rank", group=group
        )
        setattr(encoder.get_submodule(parent), child, sharded)
    return names


def _is_table(module: nn.Module) -> bool:
    return isinstance(module, (nn.Embedding, nn.EmbeddingBag, ShardedEmbedding))


def step_peak_memory(trainer: Trainer, batch: Any, device: torch.device | str | None = None):
    """Peak memory (``chapter20.core.measure.MemoryReport``, by component) of one step of
    ``trainer`` on ``batch`` (§20.3), after a first step that creates the optimizer state, as in
    the middle of a run."""
    trainer.step(batch)
    return peak_memory(
        lambda: trainer.step(batch),
        model=trainer.module,
        optimizer=trainer.optimizer,
        inputs=batch,
        device=device,
    )
