"""The terminal app: a level-of-detail timeline of every rank, event details, search, summary
and the predicted-vs-measured diff screen (Textual)."""
