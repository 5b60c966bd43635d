"""One module per mechanism of the chapter (§20.1–§20.4): sharded tables, contrastive loss with
cross-rank negatives and gradient caching, accumulation, mixed precision, activation
checkpointing, optimizers, the memory planner, distributed set-up, pipeline/ZeRO/overlap.
Each is usable alone; ``chapter20.training`` composes them (ARCHITECTURE.md)."""
