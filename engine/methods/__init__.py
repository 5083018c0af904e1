"""engine.methods."""
