"""§20.5.2 Data order that can be resumed.

:class:`ResumableBatchSampler` makes the order of the batches a function of (seed, epoch,
position), so a run resumed from a checkpoint sees exactly the batches it would have seen.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from chapter20.core.checks import check_int
from chapter20.techniques.distributed import group_rank_and_size

__all__ = [
    "DEALS",
    "ResumableBatchSampler",
]

#: How a global batch is dealt to the ranks: "slices" (rank r takes the r-th of W equal
#: slices) or "round_robin" (rank r takes every W-th example from the r-th, the order in which
#: ``torch.utils.data.DistributedSampler`` deals its permutation out).
DEALS = ("slices", "round_robin")


class ResumableBatchSampler:
    """Batches of example indices whose order depends only on (seed, epoch, position) (§20.5.2).

    Each epoch is a fresh permutation of ``num_examples`` drawn from ``seed + epoch``, cut into
    global batches of ``global_batch`` (the incomplete last one is dropped, so every step has
    the same size); rank r of W takes the r-th of W equal slices, or, with
    ``deal="round_robin"``, every W-th example from the r-th — exactly the batches of a
    ``DistributedSampler`` (same seed and epoch, ``drop_last=True``) behind a ``DataLoader`` of
    ``global_batch / W`` rows per rank. :meth:`next_batch` advances
    the position, and :meth:`state_dict` saves it, so a resumed run continues with the batch
    an uninterrupted run would take next, at any world size that divides ``global_batch``.
    Use it directly (``sampler.next_batch()``), not behind a DataLoader whose workers read ahead.
    """

    def __init__(
        self,
        num_examples: int,
        global_batch: int,
        *,
        seed: int = 0,
        group: dist.ProcessGroup | None = None,
        deal: str = "slices",
    ):
        self.num_examples = check_int("num_examples", num_examples, 1)
        self.global_batch = check_int("global_batch", global_batch, 1)
        if global_batch > num_examples:
            raise ValueError(
                f"global_batch must be <= num_examples ({num_examples}), got {global_batch}"
            )
        self.rank, self.world_size = group_rank_and_size(group)
        if global_batch % self.world_size:
            raise ValueError(
                f"global_batch ({global_batch}) must be a multiple of the world size "
                f"({self.world_size}), so that every rank gets the same number of examples"
            )
        self.seed = check_int("seed", seed, 0)
        if deal not in DEALS:
            raise ValueError(f"deal must be one of {', '.join(DEALS)}, got {deal!r}")
        self.deal = deal
        self.epoch = 0
        self.position = 0
        self._order: torch.Tensor | None = None

    @property
    def batches_per_epoch(self) -> int:
        return self.num_examples // self.global_batch

    def _epoch_order(self) -> torch.Tensor:
        if self._order is None:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            self._order = torch.randperm(self.num_examples, generator=generator)
        return self._order

    def next_batch(self) -> torch.Tensor:
        """This rank's indices of the next global batch; moves to a new epoch when one ends."""
        if self.position == self.batches_per_epoch:
            self.epoch, self.position, self._order = self.epoch + 1, 0, None
        base = self.position * self.global_batch
        self.position += 1
        if self.deal == "round_robin":
            return self._epoch_order()[
                base + self.rank : base + self.global_batch : self.world_size
            ]
        per_rank = self.global_batch // self.world_size
        start = base + self.rank * per_rank
        return self._epoch_order()[start : start + per_rank]

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "num_examples": self.num_examples,
            "global_batch": self.global_batch,
            "deal": self.deal,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue where ``state`` stopped; ValueError if it describes other data."""
        for key in ("seed", "num_examples", "global_batch", "deal"):
            saved = state.get(key, "slices")  # a state saved before deals were named: slices
            if saved != getattr(self, key):
                raise ValueError(
                    f"sampler state has {key}={saved}, this sampler {getattr(self, key)}: "
                    "a resumed run must read the same data in the same order"
                )
        self.epoch, self.position, self._order = state["epoch"], state["position"], None
