"""I/O layer: knows files and frames, not algorithms."""

from .sink import atomic_output, output_format, write_frame
from .source import Source, TableSource, open_source

__all__ = ["Source", "TableSource", "open_source", "atomic_output", "output_format", "write_frame"]
