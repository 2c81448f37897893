"""The one error a parser may raise."""

from __future__ import annotations


class ParseError(ValueError):
    """Raw evidence that cannot be read as what it claims to be; the message says what and where."""
