"""The optional C extension (compiler/trace/_speedups.c: a trace flush's node columns); everything else about the
package is in pyproject.toml. Where no C compiler is found, the build goes on without it and the trace writer uses
its Python reference (compiler/trace/columns.py)."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("compiler.trace._speedups", ["compiler/trace/_speedups.c"], optional=True)])
