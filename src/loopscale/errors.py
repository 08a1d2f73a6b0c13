"""The one exception type that user-facing entry points turn into a one-line error and exit code 2."""


class UserError(Exception):
    """Bad input from the user (config, data, table, flags). The message is one actionable line."""
