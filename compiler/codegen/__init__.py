"""Code generation: kernel AST -> expanded, lowered, linearized UOps -> LLVM IR text (`get_program`)."""
from compiler.codegen.errors import CodegenError
from compiler.codegen.program import Program, format_uops, get_program, lower_ast

__all__ = ["CodegenError", "Program", "format_uops", "get_program", "lower_ast"]
