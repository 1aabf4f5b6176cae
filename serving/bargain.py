"""The bilateral negotiation served with OpenEnv: typed action, observation and state, and the
environment (``env.bargain``'s driver with the served player in one seat, a scripted opponent in
the other)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from openenv.core.env_server import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, StrictStr, model_validator
from pydantic_core import PydanticCustomError

from env.bargain.env import DEFAULT_MAX_TURNS
from env.bargain.play import Match, SettingsError, check_max_turns, check_mode, check_seed, pick_scenario
from env.bargain.players import ALL_SELLERS, BUYERS, make_player
from env.bargain.protocol import ACTION_KINDS, MAX_REPLY_CHARS, MAX_TALK_CHARS, Action as Move, compose_reply
from env.bargain.rules import BUYER, OTHER, SELLER
from serving.base import BadReset, EpisodeNotStarted, InlineSteps, ResetOptions


class BargainAction(Action):
    """One reply of the served player: either the protocol text an LLM writes (``reply``), or
    a structured move (``kind`` and, for BUY/SELL/DEAL, ``price``) with optional talk."""

    reply: Optional[str] = Field(default=None, max_length=MAX_REPLY_CHARS,
                                 description="a whole reply in the protocol, e.g. 'Talk: hi\\nAction: [BUY] $40'")
    kind: Optional[Literal[ACTION_KINDS]] = Field(default=None, description="BUY, SELL, DEAL, REJECT or QUIT")
    price: Optional[float] = Field(default=None, gt=0, lt=1e9, description="dollars, for BUY, SELL and DEAL")
    talk: str = Field(default="", max_length=MAX_TALK_CHARS, description="what the player says (structured moves)")

    @model_validator(mode="after")
    def _one_form(self):
        if (self.reply is None) == (self.kind is None):
            raise PydanticCustomError("action_form", "give either 'reply' (protocol text) or 'kind' (a structured "
                                                     "move), not both or neither")
        if self.kind is not None and (self.kind in ("BUY", "SELL", "DEAL")) != (self.price is not None):
            # a custom error (not ValueError) keeps the 422 body JSON-serializable in openenv's handler
            raise PydanticCustomError("action_price", f"{self.kind} {'needs' if self.price is None else 'takes no'} "
                                                      "price")
        return self

    def text(self, mode: str) -> str:
        if self.reply is not None:
            return self.reply
        return compose_reply("", " ".join(self.talk.split()), Move(self.kind, self.price), mode)


class BargainObservation(Observation):
    """The served player's view when it is their turn (or the episode's end)."""

    role: str = Field(default=BUYER, description="buyer or seller: the served player's role")
    title: str = ""
    category: str = ""
    description: str = ""
    list_price: float = 0.0
    private_value: float = Field(default=0.0, description="your budget (buyer) or cost (seller); private")
    turn: int = 0
    max_turns: int = DEFAULT_MAX_TURNS
    my_offer: Optional[float] = None
    their_offer: Optional[float] = None
    messages: list[dict] = Field(default_factory=list, description=(
        "public messages since your previous observation (your reply as delivered, then the other side's), "
        "each with role, talk, action, note; a chat client appends them to its history"))
    history_len: int = Field(default=0, description="public messages in the whole episode so far")
    last_error: Optional[str] = Field(default=None, description="why your last reply was refused (reason code)")
    end_reason: Optional[str] = None
    metrics: Optional[dict] = Field(default=None, description="the episode's metrics, once it has ended")


class BargainReset(ResetOptions):
    """Reset options of the bilateral game (see ``BargainEnvironment.reset``)."""

    source: StrictStr = "builtin"
    split: StrictStr = "test"
    product: Optional[int] = None
    opponent: Optional[StrictStr] = None
    role: StrictStr = BUYER
    reasoning_mode: StrictStr = "option_a"
    max_turns: int = DEFAULT_MAX_TURNS


class BargainState(State):
    """Operator view of a session: the episode's identity and progress, no private values."""

    scenario_id: Optional[str] = None
    seed: Optional[int] = None
    role: str = BUYER
    opponent: str = "neutral"
    turn: int = 0
    done: bool = False
    end_reason: Optional[str] = None
    reward: Optional[float] = None


class BargainEnvironment(InlineSteps, Environment[BargainAction, BargainObservation, BargainState]):
    """``env.bargain``'s driver behind OpenEnv's ``Environment`` interface: the served player in one
    seat, a scripted opponent in the other."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.match: Match | None = None
        self._info = {}
        self.role, self.mode, self.last_error, self._steps, self._seen = BUYER, "option_a", None, 0, 0

    def reset(self, /, **options: Any) -> BargainObservation:
        """Start an episode with ``BargainReset``'s options: ``product`` indexes the split (drawn from the
        seed when None), ``opponent`` names the scripted player in the other seat."""
        o = BargainReset.read(options)
        seed, episode_id, source, split, product = o.seed, o.episode_id, o.source, o.split, o.product
        opponent, role, reasoning_mode, max_turns = o.opponent, o.role, o.reasoning_mode, o.max_turns
        if role not in (BUYER, SELLER):
            raise BadReset(f"role must be buyer or seller, got {role!r}")
        opponent = opponent or ("neutral" if role == BUYER else "expert")
        table = ALL_SELLERS if role == BUYER else BUYERS
        if opponent not in table:
            raise BadReset(f"unknown {OTHER[role]} {opponent!r}; choose from {', '.join(table)}")
        try:
            check_mode(reasoning_mode)
            check_max_turns(max_turns)
            seed = check_seed(0 if seed is None else seed)
            product, scenario = pick_scenario(source, split, product, seed)
        except SettingsError as exc:
            raise BadReset(str(exc)) from None
        player = make_player(OTHER[role], opponent, reasoning_mode)
        env = self.match.env if self.match is not None else None
        self.match = Match(scenario, player if role == SELLER else None, player if role == BUYER else None, seed,
                           max_turns, env)
        self.role, self.mode, self.last_error, self._steps, self._seen = role, reasoning_mode, None, 0, 0
        self._info = {"episode_id": episode_id, "scenario_id": scenario.id, "seed": seed, "role": role,
                      "opponent": opponent}
        self.match.advance()
        return self._observe()

    def step(self, action: BargainAction, timeout_s: Optional[float] = None, **_: Any) -> BargainObservation:
        if self.match is None:
            raise EpisodeNotStarted("no episode in this session: reset first")
        if self.match.env.done:
            raise EpisodeNotStarted("the episode is over: reset to start another")
        result = self.match.step(action.text(self.mode))
        self.last_error = result.info.get("error")
        self._steps += 1
        self.match.advance()
        return self._observe()

    def _observe(self) -> BargainObservation:
        env = self.match.env
        obs = env.observe(self.role)
        done = env.done
        reward = None
        if done:  # the buyer's reward; a served seller is scored by the buyer's loss
            reward = env.reward if self.role == BUYER else -env.reward
        turn = min(env.turn, env.max_turns)
        seen, self._seen = self._seen, len(obs.history)
        return BargainObservation(
            done=done, reward=reward, role=self.role, title=obs.title, category=obs.category,
            description=obs.description, list_price=obs.list_price, private_value=obs.private_value,
            turn=turn, max_turns=obs.max_turns, my_offer=obs.my_offer, their_offer=obs.their_offer,
            messages=[{"role": m.role, "talk": m.talk, "action": m.action.render(), "note": m.note}
                      for m in obs.history[seen:]], history_len=len(obs.history),
            last_error=self.last_error, end_reason=env.end_reason if done else None,
            metrics=env.metrics().to_dict() if done else None)


    @property
    def state(self) -> BargainState:
        """Built on request (not every step): the episode's identity and progress."""
        if self.match is None:
            return BargainState(**self._info, step_count=0)
        env, done = self.match.env, self.match.env.done
        reward = None if not done else env.reward if self.role == BUYER else -env.reward
        return BargainState(**self._info, step_count=self._steps, turn=min(env.turn, env.max_turns), done=done,
                            end_reason=env.end_reason, reward=reward)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="haggle-bargain", description=(
            "Bilateral price negotiation (RLVR negotiation paper): a buyer with a private budget against a "
            "regulated seller with a private cost; buyer reward clip((budget - price) / |budget - cost|, -1, 1)."),
            version="1")
