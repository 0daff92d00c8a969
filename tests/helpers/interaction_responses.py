"""What the bot answers to interactions, intercepted at discord.py's webhook layer and recorded."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import discord
from discord.webhook.async_ import AsyncWebhookAdapter

from tests.helpers.discord_payloads import (
    FakeResponse,
    SentBody,
    custom_ids,
    not_found,
    read_files,
    request_body,
    walk_components,
)
from tests.helpers.dpytest_env import DpytestEnv

# Interaction callback types (InteractionResponseType).
PONG, CHANNEL_MESSAGE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE, UPDATE_MESSAGE = 1, 4, 5, 6, 7
AUTOCOMPLETE_RESULT, MODAL = 8, 9
# Message flags.
EPHEMERAL = 64
LOADING = 128


@dataclass
class RecordedModal:
    custom_id: str
    title: str
    components: list[dict[str, Any]]

    @property
    def text_inputs(self) -> list[dict[str, Any]]:
        """The text inputs, each with the ``label`` of the Label component wrapping it."""
        out = []
        for top in self.components:
            labelled = top.get("type") == 18
            for component in [top["component"]] if labelled else top.get("components", []):
                if component.get("type") == 4:
                    item = dict(component)
                    if labelled:
                        item.setdefault("label", top.get("label"))
                    out.append(item)
        return out


@dataclass
class RecordedCall(SentBody):
    """One webhook call the bot made for an interaction."""

    # response (``type``: its callback type), followup, edit_original, delete_original,
    # fetch_original, or edit_, delete_, fetch_message (a follow-up, by id).
    kind: str
    type: int | None
    payload: dict[str, Any]  # the JSON sent; for the response, the callback's ``data``
    message_id: int | None = None
    files: list[tuple[str, bytes]] = field(default_factory=list)

    @property
    def content(self) -> str | None:
        return self.payload.get("content")

    @property
    def flags(self) -> int:
        return int(self.payload.get("flags") or 0)

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)

    @property
    def buttons(self) -> list[Mapping[str, Any]]:
        return [c for c in walk_components(self.components) if c.get("type") == 2]

    @property
    def modal(self) -> RecordedModal | None:
        if self.kind != "response" or self.type != MODAL:
            return None
        return RecordedModal(
            custom_id=self.payload["custom_id"],
            title=self.payload.get("title", ""),
            components=list(self.payload.get("components") or []),
        )

    @property
    def choices(self) -> list[dict[str, Any]] | None:
        if self.kind != "response" or self.type != AUTOCOMPLETE_RESULT:
            return None
        return list(self.payload.get("choices") or [])


@dataclass
class InteractionResult:
    """Everything recorded for one interaction, calls made later with its token (views) included."""

    payload: dict[str, Any] = field(repr=False)
    env: DpytestEnv = field(repr=False)
    interaction: discord.Interaction | None = field(default=None, repr=False)
    calls: list[RecordedCall] = field(default_factory=list)
    blocked: str | None = None  # why Discord would not have delivered it (gate=True)
    original_message_id: int | None = None

    @property
    def response(self) -> RecordedCall | None:
        return next((c for c in self.calls if c.kind == "response"), None)

    @property
    def responded(self) -> bool:
        return self.response is not None

    @property
    def response_type(self) -> int | None:
        return self.response.type if self.response else None

    @property
    def deferred(self) -> bool:
        return self.response_type in (DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE)

    @property
    def followups(self) -> list[RecordedCall]:
        return [c for c in self.calls if c.kind == "followup"]

    @property
    def edits(self) -> list[RecordedCall]:
        return [c for c in self.calls if c.kind == "edit_original"]

    @property
    def original_message(self) -> dict[str, Any] | None:
        """The original response message as it is now (after edits), if any."""
        if self.original_message_id is None:
            return None
        return self.env.message_payload(self.original_message_id)

    @property
    def ephemeral(self) -> bool:
        """Whether the response (without one, the first follow-up) is ephemeral."""
        first = self.response or next(iter(self.followups), None)
        return bool(first and first.ephemeral)

    @property
    def content(self) -> str | None:
        """Text of the original response (after edits), else of the first follow-up."""
        original = self.original_message
        if original is not None and (original.get("content") or not self.followups):
            return original.get("content")
        if self.response is not None and self.response.content is not None:
            return self.response.content
        return self.followups[0].content if self.followups else None

    @property
    def embeds(self) -> list[discord.Embed]:
        original = self.original_message
        if original is not None and original.get("embeds"):
            return [discord.Embed.from_dict(e) for e in original["embeds"]]
        return next((call.embeds for call in self.calls if call.embeds), [])

    @property
    def components(self) -> list[dict[str, Any]]:
        original = self.original_message
        if original is not None:
            return list(original.get("components") or [])
        return self.response.components if self.response else []

    @property
    def custom_ids(self) -> list[str]:
        return custom_ids(self.components)

    @property
    def modal(self) -> RecordedModal | None:
        return self.response.modal if self.response else None

    @property
    def choices(self) -> list[dict[str, Any]] | None:
        return self.response.choices if self.response else None

    @property
    def command_failed(self) -> bool:
        return bool(self.interaction and self.interaction.command_failed)

    def texts(self) -> list[str]:
        """Every non-empty ``content`` the bot sent for this interaction, in order."""
        return [c.content for c in self.calls if c.content]


@dataclass
class _Session:
    recorder: ResponseRecorder
    result: InteractionResult
    channel: Any
    component_message_id: int | None


_SESSIONS: dict[str, _Session] = {}  # by interaction token
_ORIGINAL_WEBHOOK_REQUEST = AsyncWebhookAdapter.request


async def _recording_request(
    self: AsyncWebhookAdapter,
    route: Any,
    session: Any = None,
    *,
    payload: dict[str, Any] | None = None,
    multipart: list[dict[str, Any]] | None = None,
    files: Sequence[discord.File] | None = None,
    **kwargs: Any,
) -> Any:
    recorded = _SESSIONS.get(route.webhook_token) if route.webhook_token else None
    if recorded is None:
        return await _ORIGINAL_WEBHOOK_REQUEST(
            self, route, session, payload=payload, multipart=multipart, files=files, **kwargs
        )
    body = request_body(payload, multipart)
    return recorded.recorder.handle(recorded, route, body, read_files(files))


class _AdapterPatch:
    users = 0

    @classmethod
    def acquire(cls) -> None:
        if cls.users == 0:
            AsyncWebhookAdapter.request = _recording_request  # type: ignore[method-assign]
        cls.users += 1

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users == 0:
            AsyncWebhookAdapter.request = _ORIGINAL_WEBHOOK_REQUEST  # type: ignore[method-assign]


class ResponseRecorder:
    """Answers the webhook calls of the interactions it expects as Discord would; records them."""

    def __init__(self, env: DpytestEnv, *, echo_messages: bool) -> None:
        self.env = env
        # Non-ephemeral messages also come back as MESSAGE_CREATE/UPDATE, as from Discord.
        self.echo_messages = echo_messages
        self._tokens: list[str] = []
        _AdapterPatch.acquire()

    def expect(self, payload: dict[str, Any], channel: Any) -> InteractionResult:
        """Record what the bot answers to the interaction ``payload`` (from now on)."""
        result = InteractionResult(payload=payload, env=self.env)
        message = payload.get("message")
        component_message_id = int(message["id"]) if message else None
        _SESSIONS[payload["token"]] = _Session(self, result, channel, component_message_id)
        self._tokens.append(payload["token"])
        return result

    def close(self) -> None:
        for token in self._tokens:
            _SESSIONS.pop(token, None)
        _AdapterPatch.release()

    def _echo(self, data: dict[str, Any], *, created: bool) -> None:
        if self.echo_messages and not int(data.get("flags") or 0) & EPHEMERAL:
            self.env.echo(data, created=created)

    def _edit(
        self, data: dict[str, Any], body: Mapping[str, Any], files: list[tuple[str, bytes]]
    ) -> None:
        self.env.apply_edit(data, body, files)
        data["flags"] = int(data.get("flags") or 0) & ~LOADING

    def handle(
        self, session: _Session, route: Any, body: dict[str, Any], files: list[tuple[str, bytes]]
    ) -> Any:
        method, path = route.method, route.path
        if path.endswith("/callback"):
            return self._respond(session, body, files)
        if path == "/webhooks/{webhook_id}/{webhook_token}" and method == "POST":
            return self._follow_up(session, body, files)
        if "/messages/" in path:
            return self._message_call(session, method, route.url, body, files)
        raise NotImplementedError(f"interaction harness: unsupported {method} {route.url}")

    def _follow_up(
        self, session: _Session, body: dict[str, Any], files: list[tuple[str, bytes]]
    ) -> dict[str, Any]:
        result = session.result
        if result.response is None:
            raise not_found("Unknown Webhook (follow-up before the initial response)")
        original_id = result.original_message_id
        original = self.env.message_payload(original_id) if original_id is not None else None
        if original is not None and int(original.get("flags") or 0) & LOADING:
            # As on Discord: the first follow-up after a "thinking…" defer becomes the
            # original message (keeping its ephemeral flag), not a new one.
            self._edit(original, {k: v for k, v in body.items() if k != "flags"}, files)
            result.calls.append(RecordedCall("followup", None, body, int(original["id"]), files))
            return copy.deepcopy(original)
        data = self._new_message(session, body, files, flags=int(body.get("flags") or 0))
        result.calls.append(RecordedCall("followup", None, body, int(data["id"]), files))
        return copy.deepcopy(data)

    def _message_call(
        self,
        session: _Session,
        method: str,
        url: str,
        body: dict[str, Any],
        files: list[tuple[str, bytes]],
    ) -> Any:
        result = session.result
        target = url.rsplit("/", 1)[-1].split("?", 1)[0]
        is_original = target == "@original"
        message_id = result.original_message_id if is_original else int(target)
        suffix = "original" if is_original else "message"
        data = self.env.message_payload(message_id) if message_id is not None else None
        if data is None:
            raise not_found("Unknown Message")
        if method == "GET":
            result.calls.append(RecordedCall(f"fetch_{suffix}", None, {}, message_id))
            return copy.deepcopy(data)
        if method == "PATCH":
            self._edit(data, body, files)
            result.calls.append(RecordedCall(f"edit_{suffix}", None, body, message_id, files))
            self._echo(data, created=False)
            return copy.deepcopy(data)
        if method == "DELETE":
            result.calls.append(RecordedCall(f"delete_{suffix}", None, {}, message_id))
            self.env.forget_message(data["id"])
            return None
        raise NotImplementedError(f"interaction harness: unsupported {method} {url}")

    def _new_message(
        self,
        session: _Session,
        body: dict[str, Any],
        files: list[tuple[str, bytes]],
        *,
        flags: int,
    ) -> dict[str, Any]:
        interaction = session.result.payload
        msg_type = 0
        if interaction["type"] == 2:  # a command: a chat-input (20) or context menu (23) reply
            msg_type = 23 if interaction["data"].get("type", 1) in (2, 3) else 20
        application_id = str(self.env.bot.application_id)
        extra = {
            "webhook_id": application_id,
            "application_id": application_id,
            "interaction_metadata": {
                "id": interaction["id"],
                "type": interaction["type"],
                "user": interaction.get("member", {}).get("user") or interaction["user"],
                "authorizing_integration_owners": interaction.get(
                    "authorizing_integration_owners", {}
                ),
            },
        }
        channel = session.channel or discord.Object(int(interaction["channel"]["id"]))
        data = self.env.bot_message_payload(
            channel, body, files, msg_type=msg_type, flags=flags, extra=extra
        )
        self.env.store(data, in_history=not flags & EPHEMERAL)
        self._echo(data, created=True)
        return data

    def _respond(
        self, session: _Session, body: dict[str, Any], files: list[tuple[str, bytes]]
    ) -> dict[str, Any]:
        result = session.result
        if result.response is not None:
            raise discord.HTTPException(
                FakeResponse(400, "Bad Request"),
                {"code": 40060, "message": "Interaction has already been acknowledged."},
            )
        response_type = int(body["type"])
        data = dict(body.get("data") or {})
        flags = int(data.get("flags") or 0)
        message: dict[str, Any] | None = None
        if response_type == CHANNEL_MESSAGE:
            message = self._new_message(session, data, files, flags=flags)
            result.original_message_id = int(message["id"])
        elif response_type == DEFERRED_CHANNEL_MESSAGE:
            message = self._new_message(session, {}, [], flags=flags | LOADING)
            result.original_message_id = int(message["id"])
        elif response_type in (DEFERRED_UPDATE, UPDATE_MESSAGE):
            message_id = session.component_message_id
            result.original_message_id = message_id
            message = self.env.message_payload(message_id) if message_id is not None else None
            if response_type == UPDATE_MESSAGE and message is not None:
                self.env.apply_edit(message, data, files)
                self._echo(message, created=False)
        message_id = (
            result.original_message_id
            if response_type not in (PONG, AUTOCOMPLETE_RESULT, MODAL)
            else None
        )
        result.calls.append(RecordedCall("response", response_type, data, message_id, files))
        interaction = result.payload
        out: dict[str, Any] = {
            "interaction": {
                "id": interaction["id"],
                "type": interaction["type"],
                "response_message_loading": response_type == DEFERRED_CHANNEL_MESSAGE,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            }
        }
        if message is not None:
            out["interaction"]["response_message_id"] = str(message["id"])
            out["resource"] = {"type": response_type, "message": copy.deepcopy(message)}
        return out
