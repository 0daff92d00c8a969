"""A conversation: turns, summaries and the tools the model calls.

Sits above the memory core and the LLM client, and below Discord.

turn            one turn: guards, prompt, the tool loop, the reply
fitting         what of a turn's prompt fits a provider's context
images          image parts for vision models (limits, size cap, data URLs)
summarizer/     folds a channel's new messages into its memory with a separate call
unsaved         a "remember that…" the model left unstored: facts extracted, or said so
upkeep          after an answer whose memory is due, a call that may only update it
tools/          the tools offered to the model: update_short_term_memory, long-term
access          whether a message may start a turn: owners, the DM switch, a server's lists
server_profile  a server's own persona (checked when set) and model (for its turns)
"""

from bot.conversation.access import Refusal, refusal
from bot.conversation.server_profile import PersonaRefused, clean_persona, server_model
from bot.conversation.summarizer import Summarizer, SummaryOutcome
from bot.conversation.turn import TurnReply, TurnRequest, TurnRunner

__all__ = [
    "PersonaRefused",
    "Refusal",
    "Summarizer",
    "SummaryOutcome",
    "TurnReply",
    "TurnRequest",
    "TurnRunner",
    "clean_persona",
    "refusal",
    "server_model",
]
