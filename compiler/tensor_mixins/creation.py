"""Tensor methods: creation (a mixin of Tensor; uses only the Tensor's own methods via self and type(self))."""
from __future__ import annotations


class CreationMixin:
  __slots__ = ()
