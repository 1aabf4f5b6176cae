"""The GPU market served with OpenEnv: the client plays lab 0 with JSON actions, the other labs
are scripted counterparts acting inside ``step``."""

from __future__ import annotations

from typing import Any, Optional

from openenv.core.env_server import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, StrictStr, model_validator
from pydantic_core import PydanticCustomError

from env.market.actions import MAX_ACTION_CHARS, Invalid, validate as validate_market
from env.market.play import MarketMatch
from env.settings import SettingsError, check_seed
from serving.base import BadReset, EpisodeNotStarted, InlineSteps, ResetOptions


class MarketAction(Action):
    """One action of the served lab (lab 0): the JSON text a model writes (``reply``: anything that
    is not an action is refused by the environment with a reason code and the invalid-action
    penalty, like any agent's), or the action object itself (``move``: checked against the action
    schema here, so a malformed one is a 422 and never reaches the game)."""

    reply: Optional[str] = Field(default=None, max_length=MAX_ACTION_CHARS,
                                 description='JSON text, e.g. \'{"action": "buy_spot", "hours": 20}\'')
    move: Optional[dict] = Field(default=None, description="an action object of the schema (GET /schema, "
                                                           "env.market.ACTION_SCHEMA)")

    @model_validator(mode="after")
    def _one_form(self):
        if (self.reply is None) == (self.move is None):
            raise PydanticCustomError("action_form", "give either 'reply' (JSON text) or 'move' (an action "
                                                     "object), not both or neither")
        if self.move is not None:
            checked = validate_market(self.move)
            if isinstance(checked, Invalid):
                raise PydanticCustomError("market_action", "{code}: {detail}",
                                          {"code": checked.code, "detail": checked.detail})
        return self


class MarketObservation(Observation):
    """The served lab's view when it is to act (or at the episode's end). ``reward`` is the dense
    reward lab 0 earned since its previous action (its own action and what the other labs did in
    between); the rewards of an episode add up to its total."""

    view: dict = Field(default_factory=dict, description=(
        "the lab's own view (MarketEnv.observe): money, jobs, blocks, the public market, offers and coalitions "
        "involving it, the events delivered since its previous view, and the moves open to it now (ids filled "
        "in; free fields null)"))
    last: Optional[dict] = Field(default=None, description="the result of your previous action: ok, code, detail")
    total_reward: float = Field(default=0.0, description="lab 0's reward so far in this episode")
    outcome: Optional[dict] = Field(default=None, description="lab 0's reward terms and outcome, once it has ended")


class MarketReset(ResetOptions):
    """Reset options of the market (see ``MarketEnvironment.reset``)."""

    task: StrictStr = "single_trade"
    counterparts: Optional[StrictStr] = None


class MarketState(State):
    """Operator view of a market session: identity and progress, nothing private of any lab."""

    task: Optional[str] = None
    seed: Optional[int] = None
    counterparts: Optional[str] = None
    round: int = 0
    done: bool = False
    total_reward: float = 0.0


class MarketEnvironment(InlineSteps, Environment[MarketAction, MarketObservation, MarketState]):
    """``env.market``'s driver behind OpenEnv: the client plays lab 0; the other labs are the
    scripted counterparts (the world's archetypes, or one chosen at reset), who act inside ``step``."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.match: MarketMatch | None = None
        self._info: dict = {}
        self._steps, self._total = 0, 0.0

    def reset(self, /, **options: Any) -> MarketObservation:
        """Start an episode with ``MarketReset``'s options: the task, and one archetype for every other lab
        (``counterparts``; by default each lab's own)."""
        o = MarketReset.read(options)
        seed, episode_id, task, counterparts = o.seed, o.episode_id, o.task, o.counterparts
        try:
            seed = check_seed(0 if seed is None else seed)
            self.match = MarketMatch(task, seed, None, counterparts)
        except SettingsError as exc:
            raise BadReset(str(exc)) from None
        self._info = {"episode_id": episode_id, "task": task, "seed": seed, "counterparts": counterparts}
        self._steps, self._total = 0, 0.0
        return self._observe(None, self._others())

    def step(self, action: MarketAction, timeout_s: Optional[float] = None, **_: Any) -> MarketObservation:
        if self.match is None:
            raise EpisodeNotStarted("no episode in this session: reset first")
        if self.match.env.done:
            raise EpisodeNotStarted("the episode is over: reset to start another")
        result = self.match.step(action.reply if action.reply is not None else action.move)
        self._steps += 1
        reward = result.rewards.get(0, 0.0) + self._others()
        return self._observe(result, reward)

    def _others(self) -> float:
        """The scripted labs act until lab 0 is to move; returns what that earned or cost lab 0."""
        return sum(step.rewards.get(0, 0.0) for step in self.match.moves())

    def _observe(self, result, reward: float) -> MarketObservation:
        env = self.match.env
        self._total += reward
        done = env.done
        return MarketObservation(
            done=done, reward=reward, view=env.observe(0), total_reward=self._total,
            last=None if result is None else {"ok": result.ok, "code": result.code, "detail": result.detail},
            outcome=env.outcome(0) if done else None)

    @property
    def state(self) -> MarketState:
        if self.match is None:
            return MarketState(**self._info, step_count=0)
        return MarketState(**self._info, step_count=self._steps, round=self.match.env.round, done=self.match.env.done,
                           total_reward=self._total)

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="haggle-market", description=(
            "The scarce-GPU market: AI labs with private budgets and jobs trade GPU capacity, pitch to a judge, "
            "form coalitions and weather shocks; the client plays lab 0 with JSON actions; dense reward whose "
            "terms sum to lab 0's economic outcome over its total job value."), version="1")
