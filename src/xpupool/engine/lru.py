"""A least-recently-used map with a fixed number of entries, for the caches of a long-running
engine: each cache lives on the object that owns what it caches (the pipeline, a scorer, a filter)
and states its bound, so that a server taking requests for months holds as much as on day one.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``bound`` entries; :meth:`put` past it drops the least recently got or put."""

    def __init__(self, bound: int) -> None:
        if bound < 1:
            raise ValueError("an LRU cache holds at least one entry")
        self.bound = bound
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: K, value: V) -> V:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.bound:
            self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
