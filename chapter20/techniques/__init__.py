"""One module per mechanism of the chapter (§20.1–§20.4): sharded tables (and their proofs on every
rank), contrastive loss with cross-rank negatives and gradient caching, accumulation, mixed
precision, activation checkpointing (and its policies compared), optimizers, the byte formulas of
each training-state component (``memory_model``; the planner of a whole step is
``chapter20.training.memory_plan``), distributed set-up and local groups, DDP's communication hooks
(``ddp_hooks``) and practices (``ddp_practices``), the all-reduce's cost measured
(``allreduce_timing``) and modelled with data-parallel scaling (``communication_model``), pipeline
stages, ZeRO-1, tensor parallelism, stragglers. Each is usable alone; ``chapter20.training``
composes them (ARCHITECTURE.md)."""
