"""§20.6 The configuration of the capstone run: one :class:`RunConfig`.

It holds what is particular to the run (the encoder, the batch and how the rate follows it,
evaluation, where files go) next to the two configurations every run shares: the composed
step's :class:`~chapter20.training.config.TrainConfig` (``training``) and the resumable loop's
:class:`~chapter20.training.loop.LoopConfig` (``loop``). ``chapter20 train`` derives its
options from these fields (``chapter20.core.options``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from chapter20.capstone.recipe import MODELS, EncoderRecipe
from chapter20.core.checks import check_int, check_optional_int, check_positive
from chapter20.core.options import option
from chapter20.techniques.distributed import scale_lr
from chapter20.training.config import TrainConfig
from chapter20.training.loop import LoopConfig

__all__ = ["CAPSTONE_COMPOSED", "CAPSTONE_LOOP", "CAPSTONE_TRAINING", "LR_SCALING", "RunConfig"]

#: How the learning rate follows the global batch: "none", or "linear" (§20.4.1, C14:
#: ``lr × batch / base_batch``, with the warm-up).
LR_SCALING = ("none", "linear")
#: The composed step of the capstone recipe: AdamW (fused) at 1e-3 for ``base_batch`` documents (the
#: Transformer from a random start trains better at 3e-4: ``--lr 3e-4``), no weight decay, 20
#: warm-up steps, symmetric InfoNCE at temperature 0.2.
CAPSTONE_TRAINING = TrainConfig(
    optimizer="adamw_fused",
    lr=1e-3,
    weight_decay=0.0,
    warmup_steps=20,
    temperature=0.2,
    symmetric=True,
)
#: The recipe's step with every memory technique of the chapter composed (§20.2–§20.3): bf16
#: autocast, gradient caching in chunks of 128 documents, every layer's activations recomputed
#: (the bag's gathered rows), and 8-bit AdamW state for every parameter, the table included.
CAPSTONE_COMPOSED = replace(
    CAPSTONE_TRAINING, precision="bf16", chunk_size=128, activation_checkpointing="every_layer",
    optimizer="adamw8bit", state_32bit_tables=False,
)  # fmt: skip
#: The capstone's checkpoints: every 50 steps.
CAPSTONE_LOOP = LoopConfig(checkpoint_every=50)


@dataclass(frozen=True)
class RunConfig:
    """The capstone run (§20.6); every field is checked on creation.

    ``output_dir`` holds the checkpoints (``checkpoints/``), the encoder file and the summary.
    ``model`` ("bag": the recipe's weighted bag; "transformer": 2 blocks, random start) of width
    ``dim``, seeded by ``seed``; ``steps`` optimizer steps of ``batch`` documents (two views
    each, global over the ranks); ``training.lr`` is the rate at ``base_batch`` documents,
    scaled to ``batch`` by ``lr_scaling``; ``training.sharded_table`` splits the bag's rows over
    the ranks. Evaluation every ``eval_every`` steps on ``eval_pairs`` held-out pairs and Lee;
    ``plan_gpu_gb``: the GPU the memory plan is checked against.
    """

    output_dir: str = option(help="checkpoints, encoder.pt and summary.json go here")
    model: str = option("bag", "the encoder", choices=MODELS)
    dim: int = option(256, "embedding width")
    seed: int = option(0, "seed of the weights and the views")
    steps: int = option(600, "optimizer steps")
    batch: int = option(512, "documents per step, over all ranks (two views each)")
    base_batch: int = option(512, "the batch at which --lr is the rate")
    lr_scaling: str = option(
        "linear", "how the rate follows the batch (§20.4.1)", choices=LR_SCALING
    )
    eval_every: int | None = option(100, "evaluate every N steps (none: at the end only)")
    eval_pairs: int = option(
        2_000,
        "held-out next-sentence pairs of the retrieval score, at most (the test "
        "articles hold 1,246)",
    )
    plan_gpu_gb: float = option(80.0, "the GPU the memory plan is checked against, in GB")
    progress: bool = option(True, "progress bar on rank 0")
    training: TrainConfig = option(
        help="the composed step (chapter20.training.config.TrainConfig)",
        default_factory=lambda: CAPSTONE_TRAINING,
    )
    loop: LoopConfig = option(
        help="checkpoints and preemption (chapter20.training.loop.LoopConfig)",
        default_factory=lambda: CAPSTONE_LOOP,
    )

    def __post_init__(self) -> None:
        if not isinstance(self.output_dir, str) or not self.output_dir:
            raise TypeError(f"output_dir must be a non-empty str, got {self.output_dir!r}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.lr_scaling not in LR_SCALING:
            raise ValueError(f"lr_scaling must be one of {LR_SCALING}, got {self.lr_scaling!r}")
        for name in ("dim", "steps", "base_batch", "eval_pairs"):
            check_int(name, getattr(self, name), 1)
        check_int("batch", self.batch, 2)
        check_int("seed", self.seed, 0)
        check_positive("plan_gpu_gb", self.plan_gpu_gb)
        check_optional_int("eval_every", self.eval_every, 1)
        if not isinstance(self.progress, bool):
            raise TypeError(f"progress must be True or False, got {self.progress!r}")
        if not isinstance(self.training, TrainConfig):
            raise TypeError(f"training must be a TrainConfig, got {self.training!r}")
        if not isinstance(self.loop, LoopConfig):
            raise TypeError(f"loop must be a LoopConfig, got {self.loop!r}")
        if self.training.sharded_table and self.model != "bag":
            raise ValueError("training.sharded_table shards the bag's table: use model='bag'")
        object.__setattr__(self, "training", self.training.for_steps(self.steps))

    @property
    def checkpoint_dir(self) -> str:
        """Where the training state is saved and resumed from."""
        return str(Path(self.output_dir) / "checkpoints")

    @property
    def scaled_lr(self) -> float:
        """The rate of this run's global batch (§20.4.1)."""
        if self.lr_scaling == "none":
            return self.training.lr
        return scale_lr(self.training.lr, self.base_batch, self.batch)

    def recipe(self) -> EncoderRecipe:
        """The training signal (``chapter20.capstone.recipe``): the final recipe for the bag; a
        random start without IDF weights for the Transformer. Derived once per configuration:
        every call returns the same object."""
        return self._derived[0]

    def train_config(self) -> TrainConfig:
        """The composed step of this run: ``training`` at the rate of this run's batch. Derived
        once per configuration: every call returns the same object."""
        return self._derived[1]

    @cached_property
    def _derived(self) -> tuple[EncoderRecipe, TrainConfig]:
        # cached_property writes the instance's __dict__, which a frozen dataclass allows
        if self.model == "bag":
            recipe = EncoderRecipe(dim=self.dim, seed=self.seed)
        else:
            recipe = EncoderRecipe(
                model="transformer", idf=False, init="random", dim=self.dim, seed=self.seed
            )
        return recipe, replace(self.training, lr=self.scaled_lr)
