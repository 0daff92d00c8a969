"""``kioku console``: the chat pipeline in a terminal, without Discord.

session   one console conversation through the same services as the bot
terminal  where the console's logs go while it holds the terminal
"""

from bot.console.session import console
from bot.console.terminal import LOG_FILE, logs_to_file

__all__ = [
    "LOG_FILE",
    "console",
    "logs_to_file",
]
