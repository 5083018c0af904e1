"""engine.passes."""
