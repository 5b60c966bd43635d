"""One module per mechanism of the chapter (§20.1–§20.4): sharded tables, contrastive loss with
cross-rank negatives and gradient caching, accumulation, mixed precision, activation
checkpointing, optimizers, the byte formulas of each training-state component (``memory_model``;
the planner of a whole step is ``chapter20.training.memory_plan``), distributed set-up and local
groups, DDP's communication hooks (``ddp_hooks``), the all-reduce's cost measured
(``allreduce_timing``) and modelled with data-parallel scaling (``communication_model``), pipeline
stages, ZeRO-1, tensor parallelism, stragglers. Each is usable alone; ``chapter20.training``
composes them (ARCHITECTURE.md)."""
