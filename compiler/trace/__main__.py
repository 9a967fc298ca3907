"""Entry point of `python -m compiler.trace`."""
from compiler.trace.cli import main

raise SystemExit(main())
