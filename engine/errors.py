"""The one exception type the engine raises for problems with input or settings."""


class EngineError(ValueError):
    """Bad input, bad settings or an I/O failure, described in one line.

    The CLI prints ``microagg: error: <message>`` and exits with status 2; the
    message names the column, row, parameter or path at fault.
    """


class VerificationError(EngineError):
    """A run's own output failed its self-check (a published class smaller than k, or
    a row count that does not add up). Nothing is written; the CLI exits with 1,
    as this points at a bug rather than at the input."""
