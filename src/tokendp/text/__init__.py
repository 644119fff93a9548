"""Text side: spans, taggers, grouping, and building public/private contexts."""

from tokendp.text.spans import Span

__all__ = ["Span"]
