"""Runs of consecutive items, bounded both in count and in size."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def ranges_within(weights: Sequence[int], most_items: int, most_weight: int) -> Iterator[range]:
    """The indexes of ``weights`` in runs of at most ``most_items`` items weighing at most
    ``most_weight`` together; an item heavier than that is a run of its own."""
    low, size = 0, 0
    for index, weight in enumerate(weights):
        if index > low and (index - low == most_items or size + weight > most_weight):
            yield range(low, index)
            low, size = index, 0
        size += weight
    if low < len(weights):
        yield range(low, len(weights))
