"""One module per mechanism of the chapter (§20.1–§20.4): sharded tables, contrastive loss with
cross-rank negatives and gradient caching, accumulation, mixed precision, activation
checkpointing, optimizers, the byte formulas of each training-state component (``memory_model``;
the planner of a whole step is ``chapter20.training.memory_plan``), distributed set-up, the
all-reduce's cost and data-parallel scaling modelled (``communication_model``),
pipeline/ZeRO/overlap. Each is usable alone; ``chapter20.training`` composes them
(ARCHITECTURE.md)."""
