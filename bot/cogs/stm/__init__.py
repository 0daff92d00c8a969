"""The ``/stm`` extension: show, edit, summarize, categories, settings and history.

cog      StmCog: the command group and its runtime checks
forms    the modals and option parsing of the edits
answers  what show, settings and summarize answer, from the memory's state
history  the lines of ``/stm history``, one per audit event
"""

from bot.cogs.stm.cog import StmCog, setup
from bot.cogs.stm.forms import answer_blocks, quoted

__all__ = ["StmCog", "answer_blocks", "quoted", "setup"]
