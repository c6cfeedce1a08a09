"""Each evaluation sequence on exactly one process of a distributed run (DDP).

Lightning gives a distributed run's validation and test loaders torch's DistributedSampler, which pads the split
with repeats until every process holds as many sequences: with 7 validation sequences on 2 processes, one is
evaluated twice and the recorded val/loss is not the split's. EvaluationShard hands process r of w the positions
r, r + w, r + 2w, ... of the split's order instead: every sequence once, counts differing by at most one. The
metrics are torchmetrics states, summed over the processes when computed, so uneven counts give the split's value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from torch.utils.data import DistributedSampler

from ortholab.errors import ConfigError


class EvaluationShard(DistributedSampler):
    """Process `rank` of `world_size`'s share of `order` (the split's positions in evaluation order), unpadded. A
    DistributedSampler, so that Lightning keeps it instead of putting its padding one in its place."""

    def __init__(self, order: Sequence[int], rank: int, world_size: int, split: str):
        if len(order) < world_size:  # a process with nothing to evaluate would wait forever for the others' sums
            held = f"{len(order)} sequence{'s' * (len(order) != 1)}"
            raise ConfigError(
                f"the {split} split holds {held} for {world_size} processes: each process needs one at least; give "
                f"a {split} split of {world_size} or more (data.{split}_size where the task has it), or fewer "
                f"--trainer.devices"
            )
        super().__init__(list(order), num_replicas=world_size, rank=rank, shuffle=False, drop_last=False)
        self.order = list(order)

    def __iter__(self) -> Iterator[int]:
        return iter(self.order[self.rank :: self.num_replicas])

    def __len__(self) -> int:
        return len(range(self.rank, len(self.order), self.num_replicas))

    def set_epoch(self, epoch: int) -> None:
        """The order is fixed: evaluation never shuffles."""
