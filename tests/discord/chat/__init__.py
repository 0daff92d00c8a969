"""The chat on the real bot. Real parts only: discord.py's state through dpytest, the real
``openai`` client over HTTP to the scripted server, the real command tree, embedded
PostgreSQL."""
