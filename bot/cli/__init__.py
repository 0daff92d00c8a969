"""The ``kioku`` command line: each verb ends in one readable line and an exit code."""

# Imports inside functions in this package are for start-up speed only: a verb's modules
# (discord.py, the openai client, the PostgreSQL tools) load when that verb runs.
