"""longterm."""
