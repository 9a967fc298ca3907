"""The viewer's one bounded cache: values by key, least recently used out first, bounded by the sum of their weights
(bytes, characters, node positions: what each user counts). The answers and layouts kept for views (caches.py), drawn
diffs (diff.py), highlighted sources (highlight.py) and the export's layout memo (export/layouts.py) are each one."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Hashable, Iterator


class LRU:
  """Thread-safe. An item weighing more than `most` (where given) is not kept: one huge answer must not empty the
  cache. Past the budget the least recent items go, all but the newest (so one item over the budget is kept alone)."""

  def __init__(self, budget: int, most: int | None = None) -> None:
    self.budget = budget
    self.most = most
    self.used = 0
    self.hits = self.misses = 0
    self.items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()  # key -> (value, its weight)
    self.lock = threading.Lock()

  def get(self, key: Hashable) -> Any:
    """The value kept under key (now the most recent), else None."""
    with self.lock:
      got = self.items.get(key)
      if got is None:
        self.misses += 1
        return None
      self.hits += 1
      self.items.move_to_end(key)
      return got[0]

  def put(self, key: Hashable, value: Any, weight: int) -> None:
    """Keep value under key, unless a value is kept there already or it weighs more than `most`."""
    if self.most is not None and weight > self.most:
      return
    with self.lock:
      if key in self.items:
        return
      self.items[key] = (value, weight)
      self.used += weight
      while self.used > self.budget and len(self.items) > 1:
        self.used -= self.items.popitem(last=False)[1][1]

  def drop(self, prefix: tuple) -> None:
    """Let go of the values whose key (a tuple) starts with prefix."""
    with self.lock:
      for key in [k for k in self.items if k[:len(prefix)] == prefix]:
        self.used -= self.items.pop(key)[1]

  def clear(self) -> None:
    with self.lock:
      self.items.clear()
      self.used = 0

  def values(self) -> Iterator[Any]:
    """The values kept, least recent first (a snapshot)."""
    with self.lock:
      return iter([v for v, _ in self.items.values()])

  def __len__(self) -> int:
    return len(self.items)
