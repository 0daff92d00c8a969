"""The schema contract of ARCHITECTURE.md: every table and column with its type, nullability and
default, its keys and indexes."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from bot.db.engine import Database
from bot.db.models import Base

# The database contract of ARCHITECTURE.md: every table and column it names.
CONTRACT: dict[str, set[str]] = {
    "guild_settings": {
        "guild_id",
        "short_term_memory_enabled",
        "refresh_cadence",
        "render_mode",
        "crude_message_count",
        "tool_description_override",
        "nudge_override",
        "updated_at",
    },
    "stm_categories": {"id", "guild_id", "position", "slug", "label", "description"},
    "short_term_memories": {
        "id",
        "scope_kind",
        "guild_id",
        "user_id",
        "channel_id",
        "parent_channel_id",
        "summary",
        "categories",
        "turns_since_refresh",
        "last_refreshed_turn",
        "covered_through_message_id",
        "covered_through_hash",
        "contributor_ids",
        "origin",
        "origin_detail",
        "actor_user_id",
        "source_message_id",
        "version",
        "created_at",
        "updated_at",
    },
    "stm_events": {
        "id",
        "event",
        "scope_kind",
        "guild_id",
        "user_id",
        "channel_id",
        "origin",
        "actor_user_id",
        "message_id",
        "chars_before",
        "chars_after",
        "created_at",
    },
    "long_term_memories": {
        "id",
        "user_id",
        "guild_id",
        "content",
        "origin",
        "origin_detail",
        "source_message_id",
        "created_at",
        "updated_at",
    },
    "user_settings": {"user_id", "cross_context_memory"},
}


async def test_information_schema_has_every_contract_table_and_column(db: Database) -> None:
    async with db.engine.connect() as connection:
        rows = await connection.execute(
            text(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = current_schema()"
            )
        )
        found: dict[str, dict[str, str]] = {}
        for table, column, data_type in rows:
            found.setdefault(table, {})[column] = data_type
    for table, columns in CONTRACT.items():
        assert table in found, f"missing table {table}"
        missing = columns - set(found[table])
        assert not missing, f"{table} lacks {sorted(missing)}"
    # Discord ids are bigint, timestamps timestamptz.
    assert found["short_term_memories"]["channel_id"] == "bigint"
    assert found["short_term_memories"]["contributor_ids"] == "ARRAY"
    assert found["short_term_memories"]["categories"] == "jsonb"
    assert found["stm_events"]["created_at"] == "timestamp with time zone"
    assert "summary" not in found["stm_events"] and "content" not in found["stm_events"]


# The column types the contract states or implies. Discord ids are bigint, timestamps
# timestamptz; a set is "any of these" where the contract names no type (an id, a small
# count such as position 0..4).
ANY_INT = frozenset({"smallint", "integer", "bigint"})
ID = frozenset({"integer", "bigint"})
TSTZ = "timestamp with time zone"
CONTRACT_TYPES: dict[str, dict[str, str | frozenset[str]]] = {
    "guild_settings": {
        "guild_id": "bigint",
        "short_term_memory_enabled": "boolean",
        "refresh_cadence": "integer",
        "render_mode": "text",
        "crude_message_count": "integer",
        "tool_description_override": "text",
        "nudge_override": "text",
        "updated_at": TSTZ,
    },
    "stm_categories": {
        "id": ID,
        "guild_id": "bigint",
        "position": ANY_INT,
        "slug": "text",
        "label": "text",
        "description": "text",
    },
    "short_term_memories": {
        "id": ID,
        "scope_kind": "text",
        "guild_id": "bigint",
        "user_id": "bigint",
        "channel_id": "bigint",
        "parent_channel_id": "bigint",
        "summary": "text",
        "categories": "jsonb",
        "turns_since_refresh": ANY_INT,
        "last_refreshed_turn": ANY_INT,
        "covered_through_message_id": "bigint",
        "covered_through_hash": "text",
        "contributor_ids": "bigint[]",
        "origin": "text",
        "origin_detail": "text",
        "actor_user_id": "bigint",
        "source_message_id": "bigint",
        "version": "bigint",
        "created_at": TSTZ,
        "updated_at": TSTZ,
    },
    "stm_events": {
        "id": ID,
        "event": "text",
        "scope_kind": "text",
        "guild_id": "bigint",
        "user_id": "bigint",
        "channel_id": "bigint",
        "origin": "text",
        "actor_user_id": "bigint",
        "message_id": "bigint",
        "chars_before": ANY_INT,
        "chars_after": ANY_INT,
        "created_at": TSTZ,
    },
    "long_term_memories": {
        "id": ID,
        "user_id": "bigint",
        "guild_id": "bigint",
        "content": "text",
        "origin": "text",
        "origin_detail": "text",
        "source_message_id": "bigint",
        "created_at": TSTZ,
        "updated_at": TSTZ,
    },
    "user_settings": {"user_id": "bigint", "cross_context_memory": "boolean"},
}

# Where the contract says (or a primary key implies) NOT NULL, and where it says null.
CONTRACT_NOT_NULL = {
    ("guild_settings", "guild_id"),
    ("stm_categories", "id"),
    ("short_term_memories", "id"),
    ("short_term_memories", "channel_id"),
    ("short_term_memories", "categories"),
    ("stm_events", "id"),
    ("long_term_memories", "id"),
    ("user_settings", "user_id"),
}
CONTRACT_NULLABLE = {("short_term_memories", "guild_id")}  # "guild_id null for DMs"

# The defaults the contract states, as the JSON of the value PostgreSQL computes.
CONTRACT_DEFAULTS: dict[tuple[str, str], Any] = {
    ("guild_settings", "short_term_memory_enabled"): True,
    ("guild_settings", "refresh_cadence"): 5,
    ("guild_settings", "render_mode"): "crude_summary",
    ("guild_settings", "crude_message_count"): 6,
    ("short_term_memories", "categories"): {},
    ("user_settings", "cross_context_memory"): False,
}

# Every column of the migrated schema, from pg_catalog: its exact type, NOT NULL, its
# default expression (NULL if none) and its generation expression (generated columns).
CATALOG_COLUMNS = text(
    """
    SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
           CASE WHEN a.attgenerated = '' THEN pg_get_expr(d.adbin, d.adrelid) END,
           CASE WHEN a.attgenerated <> '' THEN pg_get_expr(d.adbin, d.adrelid) END
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
      AND a.attnum > 0 AND NOT a.attisdropped
    """
)


class CatalogColumn:
    def __init__(self, row: Any) -> None:
        _, _, self.type, self.not_null, self.default, self.generated = row


async def catalog_columns(db: Database) -> dict[str, dict[str, CatalogColumn]]:
    async with db.engine.connect() as connection:
        rows = await connection.execute(CATALOG_COLUMNS)
    found: dict[str, dict[str, CatalogColumn]] = {}
    for row in rows:
        found.setdefault(row[0], {})[row[1]] = CatalogColumn(row)
    return found


async def test_contract_columns_have_the_contract_types(db: Database) -> None:
    found = await catalog_columns(db)
    wrong = {
        f"{table}.{column}": found[table][column].type
        for table, columns in CONTRACT_TYPES.items()
        for column, expected in columns.items()
        if found[table][column].type
        not in (expected if isinstance(expected, frozenset) else {expected})
    }
    assert not wrong, f"types not as the contract says: {wrong}"
    # The rules hold for the columns the contract does not list too (channel_id of a
    # fact, stm_clears, ...): no Discord id narrower than bigint, no naive timestamp.
    kioku = {table.name for table in Base.metadata.sorted_tables}
    for table in kioku:
        for column, info in found[table].items():
            if column.endswith("_id"):
                assert info.type == "bigint", f"{table}.{column} is {info.type}"
            if column.endswith("_ids"):
                assert info.type == "bigint[]", f"{table}.{column} is {info.type}"
            if "timestamp" in info.type:
                assert info.type == TSTZ, f"{table}.{column} is {info.type}"


async def test_contract_not_null_and_nullable_columns(db: Database) -> None:
    found = await catalog_columns(db)
    nullable = sorted(f"{t}.{c}" for t, c in CONTRACT_NOT_NULL if not found[t][c].not_null)
    assert not nullable, f"the contract says NOT NULL: {nullable}"
    not_null = sorted(f"{t}.{c}" for t, c in CONTRACT_NULLABLE if found[t][c].not_null)
    assert not not_null, f"the contract says these may be null: {not_null}"


async def test_contract_defaults_are_the_server_defaults(db: Database) -> None:
    found = await catalog_columns(db)
    computed: dict[tuple[str, str], Any] = {}
    async with db.engine.connect() as connection:
        for (table, column), _ in CONTRACT_DEFAULTS.items():
            expression = found[table][column].default
            assert expression is not None, f"{table}.{column} has no server default"
            # Evaluated, not compared as text: the value and its JSON type (5, not "5")
            # whatever way this PostgreSQL renders the expression.
            value = await connection.scalar(text(f"SELECT to_jsonb(({expression}))::text"))
            computed[table, column] = json.loads(value)
    assert computed == CONTRACT_DEFAULTS


async def test_a_row_given_only_its_keys_gets_the_contract_defaults(db: Database) -> None:
    async with db.engine.begin() as connection:
        guild = (
            await connection.execute(
                text(
                    "INSERT INTO guild_settings (guild_id) VALUES (1) RETURNING"
                    " short_term_memory_enabled, refresh_cadence, render_mode,"
                    " crude_message_count"
                )
            )
        ).one()
        user = await connection.scalar(
            text("INSERT INTO user_settings (user_id) VALUES (2) RETURNING cross_context_memory")
        )
        categories = await connection.scalar(
            text(
                "INSERT INTO short_term_memories (scope_kind, user_id, channel_id, origin)"
                " VALUES ('user', 2, 3, 'model_tool') RETURNING categories::text"
            )
        )
    assert tuple(guild) == (True, 5, "crude_summary", 6)
    assert user is False
    assert json.loads(categories) == {}


# Every index of the migrated schema (those behind primary keys and unique constraints
# too), from pg_catalog: its key expressions in order, whether it is unique or partial,
# its access method and the types of what it indexes (the input type of each key's
# operator class: a GIN index stores a tsvector's lexemes as text).
CATALOG_INDEXES = text(
    """
    SELECT t.relname, i.relname, x.indisunique, x.indisprimary, x.indpred IS NOT NULL,
           am.amname,
           ARRAY(SELECT pg_get_indexdef(x.indexrelid, k, true)
                 FROM generate_series(1, x.indnkeyatts) AS k ORDER BY k),
           ARRAY(SELECT format_type(o.opcintype, NULL)
                 FROM generate_series(0, x.indnkeyatts - 1) AS k
                 JOIN pg_opclass o ON o.oid = x.indclass[k] ORDER BY k)
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_class t ON t.oid = x.indrelid
    JOIN pg_am am ON am.oid = i.relam
    WHERE t.relnamespace = current_schema()::regnamespace
    """
)


def index_key(expression: str) -> str:
    """An index key as written in the contract: lower case, no quotes nor spaces, no
    casts (``COALESCE(guild_id, (0)::bigint)`` is ``coalesce(guild_id,0)``)."""
    key = re.sub(r"::[a-z ]+", "", expression.lower().replace('"', ""))
    return re.sub(r"\((\d+)\)", r"\1", key).replace(" ", "")


async def catalog_indexes(db: Database) -> dict[str, list[dict[str, Any]]]:
    async with db.engine.connect() as connection:
        rows = await connection.execute(CATALOG_INDEXES)
    found: dict[str, list[dict[str, Any]]] = {}
    for table, name, unique, primary, partial, method, keys, key_types in rows:
        found.setdefault(table, []).append(
            {
                "name": name,
                "unique": unique,
                "primary": primary,
                "partial": partial,
                "method": method,
                "keys": [index_key(k) for k in keys],
                "key_types": list(key_types),
            }
        )
    return found


def unique_keys(indexes: list[dict[str, Any]]) -> set[frozenset[str]]:
    """The column sets a table's indexes make unique. A partial index does not: it
    leaves the rows outside its predicate free to repeat."""
    return {frozenset(i["keys"]) for i in indexes if i["unique"] and not i["partial"]}


async def test_contract_keys_unique_constraints_and_indexes_exist(db: Database) -> None:
    indexes = await catalog_indexes(db)
    primary = {t: [i["keys"] for i in found if i["primary"]] for t, found in indexes.items()}
    assert primary["guild_settings"] == [["guild_id"]]
    assert primary["user_settings"] == [["user_id"]]
    categories = unique_keys(indexes["stm_categories"])
    assert frozenset({"guild_id", "position"}) in categories, categories
    assert frozenset({"guild_id", "slug"}) in categories, categories
    memories = unique_keys(indexes["short_term_memories"])
    scope_key = frozenset(
        {"scope_kind", "coalesce(guild_id,0)", "coalesce(user_id,0)", "channel_id"}
    )
    assert scope_key in memories, memories
    # "index on updated_at": one the janitor's range scan can use (its first key).
    assert any(i["keys"][0] == "updated_at" for i in indexes["short_term_memories"])


async def test_stm_categories_unique_keys_are_enforced(db: Database) -> None:
    insert = (
        "INSERT INTO stm_categories (guild_id, position, slug, label, description)"
        " VALUES (1, {position}, '{slug}', 'Label', 'What it holds')"
    )
    async with db.engine.begin() as connection:
        await connection.execute(text(insert.format(position=0, slug="plans")))
        # Another guild may use the same position and slug.
        await connection.execute(
            text(insert.replace("(1,", "(2,").format(position=0, slug="plans"))
        )
    for position, slug, index in [
        (0, "other", "uq_stm_categories_guild_id_position"),
        (1, "plans", "uq_stm_categories_guild_id_slug"),
    ]:
        with pytest.raises(DBAPIError, match=index):
            async with db.engine.begin() as connection:
                await connection.execute(text(insert.format(position=position, slug=slug)))


async def test_long_term_memories_have_a_full_text_index_on_their_content(db: Database) -> None:
    indexes = await catalog_indexes(db)
    columns = (await catalog_columns(db))["long_term_memories"]
    full_text = [
        i
        for i in indexes["long_term_memories"]
        if i["method"] in ("gin", "gist") and i["key_types"] == ["tsvector"]
    ]
    assert full_text, indexes["long_term_memories"]
    for index in full_text:
        (key,) = index["keys"]
        # Either an expression index on to_tsvector(content) or one on a tsvector column
        # PostgreSQL generates from content (so the two can never disagree).
        source = columns[key].generated if key in columns else key
        assert source is not None, f"{key} is a tsvector column nothing keeps in step"
        assert "to_tsvector(" in source and "content" in source, source


async def test_stm_scope_key_is_unique_even_with_null_guild(db: Database) -> None:
    insert = text(
        "INSERT INTO short_term_memories (scope_kind, guild_id, user_id, channel_id, origin) "
        "VALUES ('user', NULL, 7, 9, 'model_tool')"
    )
    async with db.engine.begin() as connection:
        await connection.execute(insert)
    with pytest.raises(Exception, match="uq_short_term_memories_scope_key"):
        async with db.engine.begin() as connection:
            await connection.execute(insert)
