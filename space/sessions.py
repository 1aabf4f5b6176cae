"""Sessions for the Space's live games: each game under its own id, bounded in number, forgotten
after ``idle_s`` without a move. The bilateral games and the GPU market share this."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from env.bargain.play import SettingsError


class GameError(ValueError):
    """Bad input or an unknown session: the message says what to change."""


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

    @property
    def env(self):
        return self.match.env


class SessionStore:
    """``Session``s by session id; a subclass makes them (``new_game``) and shows them (``view``)."""

    view = staticmethod(lambda game: game)

    def __init__(self, max_sessions: int = 1000, idle_s: float = 1800.0):
        self.max_sessions, self.idle_s = max_sessions, idle_s
        self._games: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._games)

    def ids(self) -> list[str]:
        """The session ids of the live games (idle ones expired first)."""
        with self._lock:
            self._expire()
            return list(self._games)

    def add(self, game):
        """Keep ``game`` under its session id (refused past ``max_sessions`` live games)."""
        with self._lock:
            self._expire()
            if len(self._games) >= self.max_sessions:
                raise GameError(f"the Space is at its limit of {self.max_sessions} live games; "
                                f"try again in a few minutes")
            self._games[game.id] = game
        return game

    def start(self, **kwargs) -> dict:
        """Start a game in a new session; returns its state (with ``session_id``)."""
        return self.view(self.add(self.new_game(**kwargs)))

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
