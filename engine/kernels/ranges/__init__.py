"""The range methods: maxent (with its self-organizing map) and mnqia."""
