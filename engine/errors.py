"""The one exception type the engine raises for problems with input or settings."""


class EngineError(ValueError):
    """Bad input, bad settings or an I/O failure, described in one line.

    The CLI prints ``microagg: error: <message>`` and exits with status 2; the
    message names the column, row, parameter or path at fault.
    """
