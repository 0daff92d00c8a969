"""The ``/kioku`` extension: a server's persona, model and access lists.

cog      KiokuCog: the command group
answers  what each command replies
"""

from bot.cogs.kioku.cog import KiokuCog, setup

__all__ = ["KiokuCog", "setup"]
