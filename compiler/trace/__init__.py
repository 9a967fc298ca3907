"""Tracing: the record schema, the trace file writer/reader, and the recorder switched by the VIZ env var."""
from compiler.trace.recorder import disable, enable, record, trace_context, traced_context, viz_level

__all__ = ["TraceFormatError", "TraceReader", "TraceWriter", "disable", "enable", "record", "trace_context",
           "traced_context", "viz_level"]


def __getattr__(name: str):
  # the file format is imported on first use, so the compiler's import does not pay for it when VIZ is off
  if name == "TraceFormatError":
    from compiler.trace.format import TraceFormatError
    return TraceFormatError
  if name == "TraceReader":
    from compiler.trace.reader import TraceReader
    return TraceReader
  if name == "TraceWriter":
    from compiler.trace.writer import TraceWriter
    return TraceWriter
  raise AttributeError(f"module 'compiler.trace' has no attribute {name!r}")
