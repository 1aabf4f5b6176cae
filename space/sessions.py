"""Sessions for the Space's live games: each game under its own id, bounded in number, forgotten
after ``idle_s`` without a move. The bilateral games and the GPU market share this.

A client (one visitor's address, see ``client_of``) holds at most ``per_client`` live games, an eighth
of the Space's by default: starting one more forgets that client's least recently played game, so one
client can never fill the Space for everyone (an attack once started 816 games in 56 s) and a visitor
who opens many games is never locked out.
"""

from __future__ import annotations

import ipaddress
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from env.bargain.play import SettingsError


LOCAL = "local"  # the owner of games started in-process (no request)
TRUSTED_PROXIES_ENV = "HAGGLE_TRUSTED_PROXIES"


def client_of(request) -> str:
    """Who a Gradio request comes from, for the per-client share: the TCP peer's address, or, when that
    peer is a trusted proxy, the address the proxy appended to ``X-Forwarded-For`` (its last entry:
    earlier ones are whatever the client sent). Trusted proxies: ``$HAGGLE_TRUSTED_PROXIES`` (comma
    list of addresses or networks, or ``*``); on a Hugging Face Space (``$SPACE_ID`` set), whose own
    proxy is the only peer, every peer by default. None (a call in-process) is ``local``."""
    if request is None:
        return LOCAL
    client = getattr(request, "client", None)
    peer = getattr(client, "host", None) or "unknown"
    headers = getattr(request, "headers", None) or {}
    forwarded = headers.get("x-forwarded-for", "") if hasattr(headers, "get") else ""
    if forwarded and _trusted(peer):
        last = forwarded.split(",")[-1].strip()
        return last[:64] or peer
    return peer[:64]


def _trusted(peer: str) -> bool:
    setting = os.environ.get(TRUSTED_PROXIES_ENV)
    if setting is None:
        return bool(os.environ.get("SPACE_ID"))
    entries = [e.strip() for e in setting.split(",") if e.strip()]
    if "*" in entries:
        return True
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return False
    for entry in entries:
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


class GameError(ValueError):
    """Bad input or an unknown session: the message says what to change."""


class MoveRefused(GameError):
    """A person's move that cannot be played as given (the game goes on: the page shows it as a warning)."""


@contextmanager
def as_game_error():
    """A game's settings refused by ``env`` (``SettingsError``) as the Space's ``GameError``."""
    try:
        yield
    except SettingsError as exc:
        raise GameError(str(exc)) from None


@dataclass
class Session:
    """One live game under its session id: the game's driver (``match``), a lock for its moves, and
    when it was last touched (idle sessions are forgotten)."""

    id: str
    match: object
    lock: threading.Lock = field(default_factory=threading.Lock, kw_only=True)
    touched: float = field(default_factory=time.monotonic, kw_only=True)
    owner: str = field(default=LOCAL, kw_only=True)

    @property
    def env(self):
        return self.match.env


class SessionStore:
    """``Session``s by session id; a subclass makes them (``new_game``) and shows them (``view``)."""

    view = staticmethod(lambda game: game)

    def __init__(self, max_sessions: int = 1000, idle_s: float = 1800.0, per_client: int | None = None):
        self.max_sessions, self.idle_s = max_sessions, idle_s
        self.per_client = max(1, max_sessions // 8) if per_client is None else per_client
        if not 1 <= self.per_client <= max_sessions:
            raise ValueError(f"per_client must be from 1 to max_sessions ({max_sessions}), got {per_client}")
        self._games: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._games)

    def ids(self) -> list[str]:
        """The session ids of the live games (idle ones expired first)."""
        with self._lock:
            self._expire()
            return list(self._games)

    def add(self, game, owner: str = LOCAL):
        """Keep ``game`` under its session id for ``owner`` (``client_of(request)``): at the owner's share
        its least recently played game is forgotten; past ``max_sessions`` live games, refused."""
        with self._lock:
            self._expire()
            game.owner = owner
            mine = [g for g in self._games.values() if g.owner == owner]
            if len(mine) >= self.per_client:
                for old in sorted(mine, key=lambda g: g.touched)[: len(mine) - self.per_client + 1]:
                    del self._games[old.id]
            if len(self._games) >= self.max_sessions:
                raise GameError(f"the Space is at its limit of {self.max_sessions} live games; "
                                f"try again in a few minutes")
            self._games[game.id] = game
        return game

    def start(self, owner: str = LOCAL, **kwargs) -> dict:
        """Start a game in a new session for ``owner``; returns its state (with ``session_id``)."""
        return self.view(self.add(self.new_game(**kwargs), owner))

    def state(self, session_id: str) -> dict:
        game = self.get(session_id)
        with game.lock:
            return self.view(game)

    def get(self, session_id: str):
        with self._lock:
            game = self._games.get(session_id) if isinstance(session_id, str) else None
        if game is None:
            raise GameError(f"unknown session id {str(session_id)[:64]!r}: it never existed or expired after "
                            f"{self.idle_s / 60:.0f} idle minutes; start a new game")
        game.touched = time.monotonic()
        return game

    def end(self, session_id: str) -> None:
        with self._lock:
            self._games.pop(session_id, None)

    def _expire(self) -> None:
        now = time.monotonic()
        for sid in [s for s, g in self._games.items() if now - g.touched > self.idle_s]:
            del self._games[sid]
