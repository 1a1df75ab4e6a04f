"""The one exception type for bad input: the CLI prints its message on one line and exits 2."""


class InputError(Exception):
    """Input that kmemsim cannot use: the message says what is wrong and what to do."""
