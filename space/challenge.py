""""Can you out-haggle it?": a visitor plays one side of a held-out game against the Space's trained model,
and at the end sees their score beside what the model and a reference player scored on the same game.

- **As the buyer** (against a scripted seller persona drawn from the seed): the same game (product, seller,
  seed) is replayed with the trained model in the visitor's seat, and with the rule-based expert.
- **As the seller** (against the trained model, a buyer): the visitor's score is the seller's reward; beside it
  are the model's reward in that same game, and what the neutral scripted seller gets from the model on the
  same product and seed.

Those replays do not depend on the visitor's moves, so they are played in the background from the game's start
(yielding the model to live moves): the last move's result is ready when the visitor makes it.

The game's seed is drawn by the server and shown only when the game is over (the same seed replays the same
scripted moves, so a visitor who chose it could rehearse the game first). Finished games go to a leaderboard (one
table per role), ranked by how far the visitor beat the trained model on the same game, then by reward. Only the game record is kept: when
it ended, the name the visitor typed (optional), the role, the game (source, product, seller, seed), the
rewards, the deal and the turns. No address or identity. The records live in an SQLite file
(``$HAGGLE_LEADERBOARD_DB``, default ``~/.cache/haggle/leaderboard.sqlite``: on a Hugging Face Space with
persistent storage, point it under ``/data``). When ``$HAGGLE_LEADERBOARD_REPO`` names a Hub dataset repo and a
token is set (``$HF_TOKEN``), each record is also appended to a JSONL file that ``huggingface_hub``'s
``CommitScheduler`` commits to that repo every ``$HAGGLE_LEADERBOARD_EVERY`` minutes (default 5), the
ecosystem's way for a Space to keep data.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sqlite3
import threading
import unicodedata
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, nullcontext
from datetime import datetime, timezone
from pathlib import Path

from env.bargain.players import SELLERS
from env.bargain.rules import BUYER, SELLER
from env.text import valid_text
from space.bargain import HUMAN, MODEL, BargainSessions, GameError, check_seed
from space.sessions import LOCAL

log = logging.getLogger(__name__)
ROLES = (BUYER, SELLER)
REFERENCE = {BUYER: "expert", SELLER: "neutral"}  # the scripted player put in the visitor's seat for comparison
NOTICE = ("Only the game record is stored (time, the name you type if any, the game and its scores): no address "
          "or identity.")
NAME_CHARS = 24
DB_ENV, REPO_ENV, EVERY_ENV = "HAGGLE_LEADERBOARD_DB", "HAGGLE_LEADERBOARD_REPO", "HAGGLE_LEADERBOARD_EVERY"
MARGIN = "ROUND(reward - model_reward, 9)"  # the visitor's lead over the model on the same game (float noise is no lead)
COLUMNS = ("id", "ended_at", "name", "role", "source", "product", "title", "seller", "seed", "reward", "model_reward",
           "reference", "reference_reward", "deal", "price", "turns")


def clean_name(name: str) -> str:
    """A visitor's name as the leaderboard keeps and shows it: valid text (a lone surrogate is U+FFFD, so
    the record can be written), no control or format characters (a right-to-left override would make
    "\u202eevil txt.exe" show as another name), blanks collapsed, at most ``NAME_CHARS`` characters."""
    name = "".join(c for c in valid_text(name) if unicodedata.category(c) not in ("Cc", "Cf", "Co", "Cn"))
    return " ".join(name.split())[:NAME_CHARS].strip()


def default_path() -> Path:
    return Path(os.environ.get(DB_ENV) or Path.home() / ".cache" / "haggle" / "leaderboard.sqlite")


class Leaderboard:
    """Visitors' finished games in SQLite (one connection per call, writes serialised by a lock), and, when a
    Hub dataset repo is given, appended to a JSONL file that a ``CommitScheduler`` pushes there."""

    def __init__(self, path: str | os.PathLike | None = None, hub_repo: str = "", token: str | None = None,
                 every_minutes: float = 5.0):
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        with closing(self._connect()) as db, db:
            db.execute("CREATE TABLE IF NOT EXISTS games (id INTEGER PRIMARY KEY AUTOINCREMENT, ended_at TEXT, "
                       "name TEXT, role TEXT, source TEXT, product INTEGER, title TEXT, seller TEXT, seed INTEGER, "
                       "reward REAL, model_reward REAL, reference TEXT, reference_reward REAL, deal INTEGER, "
                       "price REAL, turns INTEGER)")
        self.scheduler = self.spool = None
        if hub_repo:
            from huggingface_hub import CommitScheduler  # noqa: PLC0415  (only when a repo is configured)

            folder = self.path.with_name(self.path.stem + "-hub")
            folder.mkdir(parents=True, exist_ok=True)
            # one file per app process, so two replicas never write the same file in the repo
            spool = folder / f"games-{uuid.uuid4().hex[:12]}.jsonl"
            try:
                self.scheduler = CommitScheduler(repo_id=hub_repo, repo_type="dataset", folder_path=folder,
                                                 path_in_repo="games", every=every_minutes, token=token,
                                                 allow_patterns=["*.jsonl"])
                self.spool = spool
            except Exception as e:  # noqa: BLE001  (the Hub unreachable or the token refused: SQLite still keeps games)
                log.warning("leaderboard: games are kept in %s only; the Hub dataset %s could not be opened: %s",
                            self.path, hub_repo, e)

    @classmethod
    def from_env(cls) -> Leaderboard:
        """The board the environment configures: SQLite at ``$HAGGLE_LEADERBOARD_DB``, and the Hub dataset
        ``$HAGGLE_LEADERBOARD_REPO`` when a token (``$HF_TOKEN``) is set too."""
        every = float(os.environ.get(EVERY_ENV) or 5)
        repo, token = os.environ.get(REPO_ENV, ""), os.environ.get("HF_TOKEN") or None
        if repo and not token:
            log.warning("leaderboard: %s is set but HF_TOKEN is not: games are kept in SQLite only", REPO_ENV)
            repo = ""
        return cls(default_path(), repo, token, every)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    def record(self, game: dict) -> int:
        """Store one finished game (the keys of ``COLUMNS`` but ``id``); returns its id."""
        row = {k: game.get(k) for k in COLUMNS if k != "id"}
        with self._lock:
            with closing(self._connect()) as db, db:
                cur = db.execute(f"INSERT INTO games ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                                 tuple(row.values()))
                gid = cur.lastrowid
            if self.scheduler is not None:
                with self.scheduler.lock:
                    with self.spool.open("a") as f:
                        f.write(json.dumps({"id": gid, **row}) + "\n")
        return gid

    def count(self, role: str) -> int:
        with closing(self._connect()) as db:
            return db.execute("SELECT COUNT(*) FROM games WHERE role = ?", (role,)).fetchone()[0]

    def games(self, role: str | None = None) -> list[dict]:
        with closing(self._connect()) as db:
            rows = db.execute("SELECT * FROM games" + (" WHERE role = ?" if role else "") + " ORDER BY id",
                              (role,) if role else ()).fetchall()
        return [dict(r) for r in rows]

    def top(self, role: str, n: int = 10) -> list[dict]:
        """The best ``n`` games of a role: the widest margin over the trained model on the same game first (what
        the challenge asks; a game's best possible reward depends on its product), then the higher reward, then
        the earliest."""
        with closing(self._connect()) as db:
            rows = db.execute(f"SELECT * FROM games WHERE role = ? ORDER BY {MARGIN} DESC, reward DESC, "
                              "id ASC LIMIT ?", (role, n)).fetchall()
        return [dict(r) for r in rows]

    def rank(self, gid: int) -> tuple[int, int]:
        """(place, games) of game ``gid`` among its role's games, in ``top``'s order."""
        with closing(self._connect()) as db:
            me = db.execute("SELECT * FROM games WHERE id = ?", (gid,)).fetchone()
            if me is None:
                raise GameError(f"no game {gid} on the leaderboard")
            margin = round(me["reward"] - me["model_reward"], 9)  # as top() orders: float noise is no margin
            ahead = db.execute(f"SELECT COUNT(*) FROM games WHERE role = ? AND ({MARGIN} > ? OR "
                               f"({MARGIN} = ? AND (reward > ? OR (reward = ? AND id < ?))))",
                               (me["role"], margin, margin, me["reward"], me["reward"], gid)).fetchone()[0]
            total = db.execute("SELECT COUNT(*) FROM games WHERE role = ?", (me["role"],)).fetchone()[0]
        return ahead + 1, total

    def close(self) -> None:
        """Push what is still spooled to the Hub (one last commit), then stop the scheduler."""
        if self.scheduler is not None:
            try:
                self.scheduler.trigger().result(timeout=120)
            finally:
                self.scheduler.stop()


class Challenges:
    """Challenge games: live games in ``sessions`` (a visitor in one seat), scored and recorded once when they
    end."""

    def __init__(self, sessions: BargainSessions, board: Leaderboard | None = None):
        self.sessions, self._board = sessions, board
        self._meta: dict[str, dict] = {}
        self._lock = threading.Lock()
        # the replays that score a challenge, one game at a time, started with it (see the module docstring)
        self._replays = ThreadPoolExecutor(max_workers=1, thread_name_prefix="challenge-replay")

    @property
    def board(self) -> Leaderboard:
        if self._board is None:  # opened on first use, so importing the Space never touches the disk or the Hub
            with self._lock:
                if self._board is None:
                    self._board = Leaderboard.from_env()
        return self._board

    def start(self, role: str = BUYER, source: str = "builtin", product: int | None = None, seed: int | None = None,
              name: str = "", owner: str = LOCAL) -> dict:
        """A challenge game; ``seed`` None (what visitors get) draws it here, unseen until the game is over."""
        if role not in ROLES:
            raise GameError(f"role must be {' or '.join(ROLES)}; got {role!r}")
        seed = secrets.randbelow(2**31) if seed is None else check_seed(seed)
        if not isinstance(name, str):
            raise GameError("name must be text")
        name = clean_name(name)
        # the visitor as buyer meets a scripted seller persona drawn from the seed; as seller, the model buyer
        opponent = list(SELLERS)[seed % len(SELLERS)] if role == BUYER else MODEL
        seats = {"buyer": HUMAN, "seller": opponent} if role == BUYER else {"buyer": MODEL, "seller": HUMAN}
        game = self.sessions.new_game(source=source, product=product, seed=seed, **seats)
        # what would let the visitor rehearse this very game stays out of every view until it ends
        game.sealed = ("seed", "product", SELLER) if role == BUYER else ("seed", "product")
        state = self.sessions.view(self.sessions.add(game, owner=owner))
        with self._lock:
            live = set(self.sessions.ids())  # challenges whose game expired are forgotten with it
            for sid in [s for s in self._meta if s not in live]:
                self._meta.pop(sid)["replays"].cancel()  # a forgotten game's replays are not played
            self._meta[state["session_id"]] = {"role": role, "name": name, "source": source, "recorded": None,
                                                "done": threading.Event(),
                                                "replays": self._start_replays(role, source, game.product, seed,
                                                                               opponent)}
        return self._finish(state)

    def _start_replays(self, role: str, source: str, product: int, seed: int, seller: str) -> Future:
        return self._replays.submit(self._play_replays, role, source, product, seed, seller)

    def _play_replays(self, role: str, source: str, product: int, seed: int, seller: str, live: bool = False) -> dict:
        """What the visitor's score is compared with on this game: the model's and the reference player's (in the
        background, yielding the model to live moves, unless ``live``)."""
        from space.model import background  # noqa: PLC0415 - the model seat, imported when first asked

        same = {"source": source, "product": product, "seed": seed}
        with nullcontext() if live else background():
            if role == BUYER:
                return {"model_reward": self._replay(buyer=MODEL, seller=seller, **same)["reward"],
                        "reference_reward": self._replay(buyer=REFERENCE[BUYER], seller=seller, **same)["reward"]}
            return {"reference_reward": self._replay(buyer=MODEL, seller=REFERENCE[SELLER], **same)["seller_reward"]}

    def _replay_rewards(self, state: dict, meta: dict) -> dict:
        """The background replays' result; played again here if they failed (the next request retries)."""
        future = meta.get("replays")
        if future is not None and not future.cancel():  # started (or done): its result; still queued: played now
            try:
                return future.result()
            except Exception:  # noqa: BLE001 - a failed replay is tried again in the foreground, where its error shows
                log.warning("a challenge's background replay failed; replaying now", exc_info=True)
        return self._play_replays(meta["role"], meta["source"], state["product"], state["seed"], state["seller"],
                                  live=True)

    def reply(self, session_id: str, action: str, price: float | None = None, talk: str = "") -> dict:
        for state in self.reply_steps(session_id, action, price, talk):
            pass
        return state

    def reply_steps(self, session_id: str, action: str, price: float | None = None, talk: str = "",
                    previews: bool = False):
        """``reply``, yielding the states on the way (the model's reply while it is written, with ``previews``) and
        last the state with the result once the game has ended."""
        if session_id not in self._meta:
            raise GameError("not a challenge game: start one with challenge_start")
        state = self.sessions.state(session_id)
        if state["done"]:  # a move after the end (a second tab, a retry): the result again, nothing recorded twice
            yield self._finish(state)
            return
        for state in self.sessions.reply_steps(session_id, action, price, talk, previews):
            if not state["done"]:
                yield state
        yield self._finish(state)

    def _finish(self, state: dict) -> dict:
        """The state, with the challenge's result once the game has ended (scored and recorded once); while it
        runs, the session's view keeps it sealed (no seed, product or opponent)."""
        if not state["done"]:
            return state
        meta = self._meta[state["session_id"]]
        with self._lock:  # the attempt this request records, or waits for
            first, done = meta["recorded"] is None, meta["done"]
            if first:
                meta["recorded"] = "pending"
        if first:
            try:
                record = self._score(state, meta)
                meta["recorded"] = {"id": self.board.record(record), **record}
            except BaseException:
                meta["recorded"], meta["done"] = None, threading.Event()  # the next request tries again
                raise
            finally:
                done.set()  # wakes those waiting on this attempt (they see its record, or that it failed)
        elif not done.wait(timeout=300):  # another request is recording this game
            raise GameError("this game's result is still being recorded; ask again in a moment")
        rec = meta["recorded"]
        if not isinstance(rec, dict):
            raise GameError("this game's result could not be recorded; ask again to retry")
        place, total = self.board.rank(rec["id"])
        return {**state, "challenge": {**rec, "place": place, "games": total, "notice": NOTICE,
                                       "leaderboard": self.board.top(rec["role"])}}

    def _score(self, state: dict, meta: dict) -> dict:
        role, out = meta["role"], state["outcome"]
        replays = self._replay_rewards(state, meta)
        if role == BUYER:
            reward, model_reward = out["reward"], replays["model_reward"]
        else:  # both seller rewards: the visitor's and the reference seller's, each against the model buyer
            reward, model_reward = out["seller_reward"], out["reward"]
        reference_reward = replays["reference_reward"]
        return {"ended_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "name": meta["name"],
                "role": role, "source": meta["source"], "product": state["product"], "title": state["title"],
                "seller": state["seller"], "seed": state["seed"], "reward": reward, "model_reward": model_reward,
                "reference": REFERENCE[role], "reference_reward": reference_reward, "deal": int(bool(out["deal"])),
                "price": out["price"], "turns": state["turn"]}

    def _replay(self, **game) -> dict:
        """The same game with agents in both seats: its outcome (buyer reward and seller reward)."""
        played = self.sessions.view(self.sessions.new_game(**game))
        return played["outcome"]
