"""Tensor methods: nn (a mixin of Tensor; uses only the Tensor's own methods via self and type(self))."""
from __future__ import annotations


class NnMixin:
  __slots__ = ()
