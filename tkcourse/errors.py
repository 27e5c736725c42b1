"""The one exception type for a user's mistake (a wrong lesson name, a damaged file, a bad argument).

Commands print such an error as one line and exit with status 2, without a traceback
(``--debug`` shows it). It is a ``ValueError``, so code that catches ``ValueError`` still works.
Like ``tkcourse.mode`` it imports nothing of the course, so any layer may raise it.
"""

from __future__ import annotations


class UserError(ValueError):
    """A mistake of the user's that a command reports in one line (exit status 2)."""
