"""A local fake of the two Discord API endpoints ``kioku doctor`` asks: ``GET /users/@me``
and ``GET /applications/@me``, answering as Discord does for a good or a bad bot token.

It runs on a thread of its own (a real HTTP server), so doctor may ask it from this
process or from a ``kioku doctor`` subprocess, in sync and async tests alike. The
``discord_api`` fixture starts one and points ``KIOKU_DISCORD_API_URL`` at it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bot.ops.discord_probe import DISCORD_API_VARIABLE

GOOD_TOKEN = "dummy-token"
MESSAGE_CONTENT = 1 << 18
MESSAGE_CONTENT_LIMITED = 1 << 19


class FakeDiscordApi:
    """Discord's API as doctor sees it; change ``token``, ``user`` or ``flags`` to script it."""

    def __init__(self) -> None:
        self.token = GOOD_TOKEN
        self.user: dict[str, Any] = {"id": "1234", "username": "Kioku", "discriminator": "0"}
        self.flags = MESSAGE_CONTENT
        self.requests: list[tuple[str, str]] = []  # (path, Authorization header)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append((self.path, self.headers.get("Authorization", "")))
                self._answer(*fake.answer(self.path, self.headers.get("Authorization", "")))

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # no access log in the test output

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/api/v10"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, path: str, authorization: str) -> tuple[int, dict[str, Any]]:
        if authorization != f"Bot {self.token}":
            return 401, {"message": "401: Unauthorized", "code": 0}
        if path == "/api/v10/users/@me":
            return 200, {**self.user, "bot": True}
        if path == "/api/v10/applications/@me":
            return 200, {"id": self.user["id"], "name": "Kioku", "flags": self.flags}
        return 404, {"message": "404: Not Found", "code": 0}

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def discord_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDiscordApi]:
    """A fake of Discord's API that accepts ``dummy-token``; doctor asks it, never Discord."""
    api = FakeDiscordApi()
    monkeypatch.setenv(DISCORD_API_VARIABLE, api.url)
    try:
        yield api
    finally:
        api.close()
