"""The chat extension: a member's message becomes a turn, and its answer a reply.

cog         ChatCog: the listeners, the per-channel queue, one turn from message to reply
gate        whether a message is for the bot and its author may start a turn here
members     which servers a DM author shares with the bot
references  the reply chain a message points at, as prompt context
request     the turn request a message becomes
streaming   a streamed answer, edited into its reply as it arrives
threads     a thread's starter message, kept until it changes
visibility  which other channels' memories and facts a channel may see
"""

from bot.cogs.chat.cog import Chat, setup
from bot.cogs.chat.gate import AccessGate

__all__ = ["AccessGate", "Chat", "setup"]
