"""engine.audit."""
