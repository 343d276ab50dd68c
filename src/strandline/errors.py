"""Errors a user can act on."""


class StrandlineError(Exception):
    """An error a user can fix; its message is one clear line."""
