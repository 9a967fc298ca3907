"""The Tensor's newer API in themed mixins; each uses only the Tensor's own methods (never imports compiler.tensor)."""
from compiler.tensor_mixins.autograd import AutogradMixin
from compiler.tensor_mixins.creation import CreationMixin
from compiler.tensor_mixins.elementwise import ElementwiseMixin
from compiler.tensor_mixins.indexing import IndexingMixin
from compiler.tensor_mixins.nn import NnMixin
from compiler.tensor_mixins.reduce import ReduceMixin

__all__ = ["AutogradMixin", "CreationMixin", "ElementwiseMixin", "IndexingMixin", "NnMixin", "ReduceMixin"]
