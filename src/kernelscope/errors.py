"""The one exception type that reaches the user as a single line and exit code 2."""


class UserError(Exception):
    """Bad input or an environment problem the user can fix; printed as one line, exit code 2."""
