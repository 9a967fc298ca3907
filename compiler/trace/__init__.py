"""The recorder switched by the VIZ env var: every traced rewrite, opt, source and timing becomes records of a trace
file (whose format, writer and reader are the vztrace package's)."""
from compiler.trace.recorder import disable, enable, record, trace_context, traced_context, viz_level

__all__ = ["disable", "enable", "record", "trace_context", "traced_context", "viz_level"]
