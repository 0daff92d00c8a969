"""The memory core: short-term memory (STM), long-term facts and their privacy rules.

Imports nothing from Discord, the LLM client or the conversation above it.

Services (the entry points):
    service          MemoryService: the facade through which STM is read, written, deleted
    longterm         LongTermService: per-user facts, their recall and deletion
    janitor          housekeeping loops: the purge of expired rows, saving turn counts

The parts behind MemoryService (sharing one MemoryState):
    state            the caches, epochs, tombstones, locks and ledger the parts share
    reading          entries from the cache or hydrated; raw windows as a prompt uses them
    prepare          a turn's start: its state, memory, window and prompt input
    writing          the write path (SPEC §3) and the turn counts of the cadence
    wipes            /refresh, /forget-me and the janitor's purge in a live process
    notices          what other processes' notices evict here; deaf and hearing again
    pending          the spool as the service sees it: when to use it, what its replay changes

A turn and its prompt:
    turn             TurnStart, PreparedTurn, TurnState: a turn as memory sees it
    prompt           prompt assembly (SPEC §5)
    gather           the messages a memory does not cover yet (after its marker)
    window           the recent raw messages of each channel (never persisted)
    intent           whether a message explicitly asks to remember or forget
    fact_visibility  where a long-term fact may be shown (never somewhere more public)

Writing and deleting:
    change           one write: its checks, sanitized values, what it does to an entry
    near_duplicates  whether a fact to remember restates, and replaces, a stored one
    sanitize         the sanitizer pipeline every stored value goes through
    categories       admin-defined categories: slugs from labels, validation
    commit           group commit: writes queued behind a transaction share the next one
    deletion         the /refresh and /forget-me transactions (live and replayed)
    spool            the durable spool of operations the database refused
    spool_file       the spool's file: its lock, fsynced appends and rewrites
    spool_pending    what waits in the spool, as reads of the memory see it
    spool_records    the spool's record format
    spool_replay     applying spooled records to the database

Caching and coherence:
    cache            the STM cache (bounded TLRU with secondary indexes)
    guild_settings   guild configuration and opt-ins: cached, announced on change
    coherence        what changed since a read began; deaf while notices are unheard
    singleflight     one database read per missing key, however many ask
"""
