"""The trace file contract, standard library only: format, reader, writer, the viewer's control token, the cache folder.

Both sides import it: the recorder (compiler.trace) writes traces with it, the viewer (viz_server) reads them."""
