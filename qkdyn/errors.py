"""The one exception type that means "the user asked for something invalid".

The CLI turns it into a single line on stderr and exit code 2; everything else is a bug and
keeps its traceback.
"""


class UserError(Exception):
    """Bad input from the user (flags, paths, values): reported as one line, exit code 2."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`UserError` with ``message`` unless ``condition`` holds."""
    if not condition:
        raise UserError(message)
