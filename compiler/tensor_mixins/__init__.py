"""The Tensor's methods by theme, as base classes of Tensor (compiler/tensor.py keeps the core: construction, the
UOp graph, realize); each uses only the Tensor's own methods via self / type(self) and never imports compiler.tensor."""
from compiler.tensor_mixins.autograd import AutogradMixin
from compiler.tensor_mixins.creation import CreationMixin
from compiler.tensor_mixins.elementwise import ElementwiseMixin
from compiler.tensor_mixins.indexing import IndexingMixin
from compiler.tensor_mixins.movement import MovementMixin
from compiler.tensor_mixins.nn import NnMixin
from compiler.tensor_mixins.reduce import ReduceMixin

__all__ = ["AutogradMixin", "CreationMixin", "ElementwiseMixin", "IndexingMixin", "MovementMixin", "NnMixin",
           "ReduceMixin"]
