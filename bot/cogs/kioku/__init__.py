"""kioku."""
