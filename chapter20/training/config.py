"""§20.6 The one configuration of the composed training step: :class:`TrainConfig`.

Every switch of ``chapter20.training.trainer.Trainer`` is a field here, checked on creation,
with its help text: the scripts' and ``chapter20 train``'s command-line options are derived
from these fields (``chapter20.core.options``), the memory planner
(``chapter20.training.memory_plan``) predicts one step of a ``TrainConfig``, and the run
configurations of the spot demo and the capstone hold one instead of copying its fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from chapter20.core.checks import (
    check_int,
    check_optional_int,
    check_optional_positive,
    check_positive,
)
from chapter20.core.options import option
from chapter20.techniques.activation_checkpointing import POLICIES
from chapter20.techniques.contrastive import DEFAULT_TEMPERATURE
from chapter20.techniques.ddp_hooks import COMPRESSIONS
from chapter20.techniques.distributed import scale_lr
from chapter20.techniques.optimizers import OPTIMIZER_KINDS
from chapter20.techniques.precision import PRECISIONS

__all__ = ["LR_SCALINGS", "SCHEDULES", "ZERO1_KINDS", "TrainConfig"]

#: Learning-rate schedules after the warm-up.
SCHEDULES = ("constant", "cosine")
#: How the rate follows the batch (``chapter20.techniques.distributed.scale_lr``): in
#: proportion (SGD's rule, C14), or by the square root (the rule often used for Adam).
LR_SCALINGS = ("linear", "sqrt")
#: The optimizer kinds whose state ``zero1`` shards (PyTorch's own optimizers).
ZERO1_KINDS = ("adamw", "adamw_fused", "sgd_nesterov")


@dataclass(frozen=True)
class TrainConfig:
    """Every switch of the composed training step (§20.6); each field is checked on creation.

    - optimizer and schedule (§20.3.2, §20.4.1): ``optimizer``, ``lr`` (the rate at
      ``base_batch``, scaled to the run's global batch by ``lr_scaling``, linearly or by the
      square root: :attr:`peak_lr`; None: not scaled), ``weight_decay`` (None: the kind's
      default), ``warmup_steps``, ``schedule``
      ("cosine" decays to 0 at ``total_steps``; None: the run's last step, see :meth:`for_run`),
      ``clip_norm`` (None: no clipping), ``state_32bit_tables``, ``zero1`` (the optimizer state
      sharded over the ranks, ZeRO stage 1);
    - precision (§20.2.2): ``precision`` ("auto": bf16 where the device runs it fast, else
      fp32), ``init_scale`` (the fp16 loss scale to start from);
    - a bigger batch than fits (§20.2.1): ``micro_batches`` (exact accumulation, for a loss
      that is a mean over examples) or ``chunk_size`` (gradient caching, for the contrastive
      loss, whose examples are each other's negatives);
    - the contrastive loss (§20.1): ``temperature``, ``learn_temperature``, ``symmetric``,
      ``cross_rank_negatives``;
    - activation checkpointing (§20.3.1): ``activation_checkpointing`` (a policy of
      ``chapter20.techniques.activation_checkpointing.POLICIES``) and, for "every_k",
      ``activation_checkpointing_k``. (Saved checkpoints of the training state are the
      resumable loop's: ``chapter20.training.loop.LoopConfig``.)
    - a table too large for one device (§20.1): ``sharded_table`` splits the rows of the
      encoder's ``nn.Embedding`` tables over the ranks (row-wise sharding beside data
      parallelism: each rank looks up its own ids);
    - data parallelism (§20.4): ``gradient_compression``, the precision the gradient all-reduce
      sends (a DDP communication hook that also counts the bytes).

    ``total_steps`` and ``global_batch`` describe the run the step belongs to: a run's
    configuration (``chapter20.training.run_config.RunConfig``) fills them in (:meth:`for_run`).
    """

    optimizer: str = option("adamw", "optimizer kind (§20.3.2)", choices=OPTIMIZER_KINDS)
    lr: float = option(1e-3, "peak learning rate (at --base-batch, if given)")
    base_batch: int | None = option(
        None,
        "the global batch at which --lr is the rate: other batches scale it as --lr-scaling "
        "says, with the warm-up (§20.4.1; none: the rate at any batch)",
    )
    lr_scaling: str = option(
        "linear", "how the rate follows the batch from --base-batch", choices=LR_SCALINGS
    )
    weight_decay: float | None = option(None, "weight decay (none: the optimizer kind's)")
    warmup_steps: int = option(0, "linear warm-up steps")
    schedule: str = option("constant", "rate after the warm-up", choices=SCHEDULES)
    total_steps: int | None = option(
        None, "the step where a cosine schedule reaches 0 (none: the run's --steps)"
    )
    clip_norm: float | None = option(None, "clip the gradient norm to this (none: no clipping)")
    state_32bit_tables: bool = option(True, "8-bit optimizers keep 32-bit state for tables")
    precision: str = option("fp32", "autocast precision (§20.2.2)", choices=(*PRECISIONS, "auto"))
    init_scale: float = option(2.0**16, "initial fp16 loss scale")
    micro_batches: int = option(1, "exact accumulation over this many micro-batches (§20.2.1)")
    chunk_size: int | None = option(
        None, "gradient caching: rows per chunk, for the contrastive loss (§20.2.1)"
    )
    temperature: float = option(DEFAULT_TEMPERATURE, "InfoNCE temperature (the start, if learned)")
    learn_temperature: bool = option(False, "learn the temperature (a parameter under DDP)")
    symmetric: bool = option(False, "InfoNCE in both directions")
    cross_rank_negatives: bool = option(True, "negatives from every rank's keys (§20.1)")
    activation_checkpointing: str = option(
        "none", "activation checkpointing policy (§20.3.1)", choices=POLICIES
    )
    activation_checkpointing_k: int | None = option(
        None, "layers per checkpointed segment, for the policy every_k"
    )
    sharded_table: bool = option(
        False,
        "split the embedding table's rows over the ranks, each rank looking up its own ids (§20.1)",
    )
    zero1: bool = option(False, "shard the optimizer state over the ranks (ZeRO stage 1, §20.3.2)")
    gradient_compression: str = option(
        "none", "what the gradient all-reduce sends under DDP (§20.4)", choices=COMPRESSIONS
    )
    global_batch: int | None = option(
        None, "the run's global batch, over all ranks (set by for_run)", cli=False
    )

    def __post_init__(self) -> None:
        self._check_optimizer()
        self._check_precision_and_batch()
        check_positive("temperature", self.temperature)
        policy, k = self.activation_checkpointing, self.activation_checkpointing_k
        if policy not in POLICIES:
            raise ValueError(
                f"activation_checkpointing must be one of {', '.join(POLICIES)}, got {policy!r}"
            )
        if (policy == "every_k") != (k is not None):
            raise ValueError(
                "activation_checkpointing_k is needed by, and only by, "
                "activation_checkpointing='every_k'"
            )
        if k is not None:
            check_int("activation_checkpointing_k", k, 1)
        for name in ("state_32bit_tables", "learn_temperature", "symmetric",
                     "cross_rank_negatives", "sharded_table", "zero1"):  # fmt: skip
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.gradient_compression not in COMPRESSIONS:
            raise ValueError(
                f"gradient_compression must be one of {', '.join(COMPRESSIONS)}, "
                f"got {self.gradient_compression!r}"
            )
        if self.zero1 and self.sharded_table:
            raise ValueError(
                "zero1 and sharded_table: each rank already holds only its table rows and their "
                "optimizer state; ZeRO would treat the rows as replicas"
            )
        if self.zero1 and self.optimizer not in ZERO1_KINDS:
            raise ValueError(
                f"zero1 shards the state of {', '.join(ZERO1_KINDS)}, got optimizer "
                f"{self.optimizer!r} (an 8-bit state is already a quarter of AdamW's)"
            )

    def _check_optimizer(self) -> None:
        if self.optimizer not in OPTIMIZER_KINDS:
            raise ValueError(
                f"optimizer must be one of {', '.join(OPTIMIZER_KINDS)}, got {self.optimizer!r}"
            )
        check_positive("lr", self.lr)
        if self.weight_decay is not None:
            check_positive("weight_decay", self.weight_decay, zero=True)
        for name in ("base_batch", "global_batch"):
            check_optional_int(name, getattr(self, name), 1)
        check_int("warmup_steps", self.warmup_steps, 0)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.lr_scaling not in LR_SCALINGS:
            raise ValueError(f"lr_scaling must be one of {LR_SCALINGS}, got {self.lr_scaling!r}")
        if self.total_steps is not None:
            check_int("total_steps", self.total_steps, 1)
        check_optional_positive("clip_norm", self.clip_norm)

    def for_run(self, steps: int, batch: int) -> TrainConfig:
        """This step in a run of ``steps`` optimizer steps of ``batch`` examples over all ranks
        (§20.4.1): ``global_batch`` is the run's batch, and a cosine schedule without
        ``total_steps`` reaches 0 at the run's last step (``steps=0``, an untrained model, leaves
        it unset). A run's configuration calls it, so ``--total-steps`` is needed only for a
        schedule that ends elsewhere."""
        steps, batch = check_int("steps", steps, 0), check_int("batch", batch, 1)
        ends = self.schedule == "cosine" and self.total_steps is None and steps > 0
        return replace(self, global_batch=batch, total_steps=steps if ends else self.total_steps)

    @property
    def peak_lr(self) -> float:
        """The rate after the warm-up (§20.4.1): ``lr``, scaled from ``base_batch`` to the run's
        ``global_batch`` by ``lr_scaling`` when ``base_batch`` is given (``lr × global_batch /
        base_batch``, or its square root;
        ValueError if the run's batch is not known: see :meth:`for_run`)."""
        if self.base_batch is None:
            return self.lr
        if self.global_batch is None:
            raise ValueError(
                "base_batch scales the rate to the run's global batch, which this step does not "
                "know: build it from a run's configuration (TrainConfig.for_run)"
            )
        return scale_lr(self.lr, self.base_batch, self.global_batch, rule=self.lr_scaling)

    def _check_precision_and_batch(self) -> None:
        if self.precision != "auto" and self.precision not in PRECISIONS:
            raise ValueError(
                f"precision must be 'auto' or one of {', '.join(PRECISIONS)}, "
                f"got {self.precision!r}"
            )
        check_positive("init_scale", self.init_scale)
        check_int("micro_batches", self.micro_batches, 1)
        if self.chunk_size is not None:
            check_int("chunk_size", self.chunk_size, 1)
            if self.micro_batches > 1:
                raise ValueError(
                    "give micro_batches (accumulation, per-example losses) or chunk_size "
                    "(gradient caching, the contrastive loss), not both"
                )
