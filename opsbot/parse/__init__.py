"""parse (stage: parse): pure functions from raw bundle text to typed facts (no I/O, no clock).

Every parser either returns typed facts or raises ``ParseError`` with a message naming what
was wrong; property tests prove nothing else escapes.
"""

from opsbot.parse.errors import ParseError

__all__ = ["ParseError"]
