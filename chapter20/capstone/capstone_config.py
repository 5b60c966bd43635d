"""§20.6 The capstone run's configuration: :class:`CapstoneConfig`, a preset of the one run
specification.

It sets the defaults of ``chapter20.training.run_config.RunConfig`` for the capstone (at most 400
steps of 512 documents, the recipe's composed step, checkpoints every 50 steps, and the scaling
studies' early stopping: evaluate every 25 steps, keep the best validation step) and adds what
only this run has: the encoder, its width and start (the validation-best configuration of the
scaling studies, ``chapter20.capstone.scaling``), evaluation, the GPU its memory plan is checked
against.
``chapter20 train`` derives its options from these fields (``chapter20.core.options``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from chapter20.capstone.recipe import INITS, MODELS, RECIPE_TRAINING, EncoderRecipe
from chapter20.capstone.scaling import SCALING_STEPS, SCALING_STOPPING
from chapter20.core.checks import check_int, check_optional_int, check_positive
from chapter20.core.options import option, preset_option
from chapter20.training.config import TrainConfig
from chapter20.training.early_stopping import EarlyStopping
from chapter20.training.loop import LoopConfig
from chapter20.training.run_config import RunConfig

__all__ = ["CAPSTONE_COMPOSED", "CAPSTONE_LOOP", "CAPSTONE_TRAINING", "CapstoneConfig"]

#: The composed step of the capstone: the recipe's (AdamW, fused, at 1e-3, no weight decay,
#: symmetric InfoNCE at temperature 0.2) as the rate for 512 documents, scaled linearly to the
#: run's batch after 20 warm-up steps (§20.4.1, C14). The Transformer from a random start trains
#: better at 3e-4 (``--lr 3e-4``).
CAPSTONE_TRAINING = replace(RECIPE_TRAINING, base_batch=512, warmup_steps=20)
#: The capstone's step with every memory technique of the chapter composed (§20.2–§20.3): bf16
#: autocast, gradient caching in chunks of 128 documents, every layer's activations recomputed
#: (the bag's gathered rows), and 8-bit AdamW state for every parameter, the table included.
CAPSTONE_COMPOSED = replace(
    CAPSTONE_TRAINING, precision="bf16", chunk_size=128, activation_checkpointing="every_layer",
    optimizer="adamw8bit", state_32bit_tables=False,
)  # fmt: skip
#: The capstone's checkpoints: every 50 steps.
CAPSTONE_LOOP = LoopConfig(checkpoint_every=50)


@dataclass(frozen=True)
class CapstoneConfig(RunConfig):
    """The capstone run (§20.6): a preset of ``RunConfig``; every field is checked on creation.

    ``output_dir`` (required) holds the checkpoints, the encoder file and the summary.
    ``model`` ("bag": the recipe's weighted bag; "transformer": 2 blocks, random start) of width
    ``dim``, the bag's table started by ``init``, seeded by ``seed`` (the defaults, width 1,024
    from the LSA start, are the validation-best configuration of notebook 11's width study);
    at most ``steps`` optimizer steps of ``batch`` documents (two views each, global over the
    ranks), stopped by ``early_stopping`` on the validation pairs; ``training.lr`` is the rate
    at ``training.base_batch`` documents, scaled to ``batch``; ``training.sharded_table`` splits
    the bag's rows over the ranks. Evaluation every ``eval_every`` steps on ``eval_pairs``
    held-out pairs, the validation pairs and Lee; ``plan_gpu_gb``: the GPU the memory plan is
    checked against.
    """

    output_dir: str = preset_option(RunConfig, "output_dir")
    steps: int = preset_option(RunConfig, "steps", SCALING_STEPS)
    batch: int = preset_option(RunConfig, "batch", 512)
    training: TrainConfig = preset_option(
        RunConfig, "training", default_factory=lambda: CAPSTONE_TRAINING
    )
    loop: LoopConfig = preset_option(RunConfig, "loop", default_factory=lambda: CAPSTONE_LOOP)
    early_stopping: EarlyStopping = preset_option(
        RunConfig, "early_stopping", default_factory=lambda: SCALING_STOPPING
    )
    model: str = option("bag", "the encoder", choices=MODELS)
    dim: int = option(1024, "embedding width")
    init: str = option(
        "lsa", "how the bag's table starts (the Transformer's is random)", choices=INITS
    )
    eval_every: int | None = option(25, "evaluate every N steps (none: at the end only)")
    eval_pairs: int = option(
        2_000,
        "held-out next-sentence pairs of the retrieval score, at most (the test "
        "articles hold 1,246)",
    )
    plan_gpu_gb: float = option(80.0, "the GPU the memory plan is checked against, in GB")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {MODELS}, got {self.model!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        for name in ("dim", "steps", "eval_pairs"):
            check_int(name, getattr(self, name), 1)
        check_int("batch", self.batch, 2)
        check_positive("plan_gpu_gb", self.plan_gpu_gb)
        check_optional_int("eval_every", self.eval_every, 1)
        if self.training.sharded_table and self.model != "bag":
            raise ValueError("training.sharded_table shards the bag's table: use model='bag'")

    def recipe(self) -> EncoderRecipe:
        """The training signal (``chapter20.capstone.recipe``): the final recipe for the bag; a
        random start without IDF weights for the Transformer. Derived once per configuration:
        every call returns the same object."""
        return self._recipe

    @cached_property
    def _recipe(self) -> EncoderRecipe:
        # cached_property writes the instance's __dict__, which a frozen dataclass allows
        if self.model == "bag":
            return EncoderRecipe(dim=self.dim, init=self.init, seed=self.seed)
        return EncoderRecipe(
            model="transformer", idf=False, init="random", dim=self.dim, seed=self.seed
        )
