"""Placeholder until the cog lands."""

from discord.ext import commands


async def setup(bot: commands.Bot) -> None:
    return None
