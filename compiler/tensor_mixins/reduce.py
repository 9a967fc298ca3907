"""Tensor methods: reduce (a mixin of Tensor; uses only the Tensor's own methods via self and type(self))."""
from __future__ import annotations


class ReduceMixin:
  __slots__ = ()
