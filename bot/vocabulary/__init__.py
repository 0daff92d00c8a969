"""The words every layer shares; imports nothing else of the bot.

model         keys, entries, raw messages, guild configuration, facts, provenance
clock         injectable time
providers     what each kind of provider can do (tools, context size, role order)
redaction/    secrets and private regions become [REDACTED:<kind>] markers
search_words  which words a long-term search looks for
"""
