"""spool."""
