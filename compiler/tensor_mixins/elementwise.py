"""Tensor methods: elementwise (a mixin of Tensor; uses only the Tensor's own methods via self and type(self))."""
from __future__ import annotations


class ElementwiseMixin:
  __slots__ = ()
