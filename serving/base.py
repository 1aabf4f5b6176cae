"""What the served games share: the errors a request can meet, typed reset options and inline steps."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError


class EpisodeNotStarted(RuntimeError):
    """``step`` before ``reset``, or after the episode ended (HTTP 409)."""


class BadReset(ValueError):
    """Reset options the environment cannot take (HTTP 400)."""


class ResetOptions(BaseModel):
    """What ``reset`` takes from a client: every door (``/reset``, ``/sessions/{id}/reset``, a WebSocket
    ``reset`` message) hands the options over as they came, and they are read here, so an unknown key,
    a key that names a Python parameter (``self``) or a value of the wrong type is one clear refusal
    (HTTP 400, or an error message on a socket), never a crash. A game adds its own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: Optional[int] = None
    episode_id: Optional[StrictStr] = Field(default=None, max_length=256)

    @classmethod
    def read(cls, options: dict) -> "ResetOptions":
        try:
            return cls.model_validate(options)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))[:64] or 'options'}: "
                                 f"{'unknown option' if e['type'] == 'extra_forbidden' else e['msg']}"
                                 for e in exc.errors(include_url=False, include_input=False)[:4])
            raise BadReset(f"reset options refused ({problems}); the options are {', '.join(cls.model_fields)}") from None


class InlineSteps:
    """Run ``reset``/``step`` on the server's event loop instead of a per-session thread: they are
    short, pure CPU (tens of microseconds), so a thread hand-off would cost more than the work."""

    async def reset_async(self, /, **options: Any):  # positional-only: a client's "self" key is an option
        return self.reset(**options)

    async def step_async(self, action, timeout_s: Optional[float] = None, **kwargs: Any):
        return self.step(action, timeout_s=timeout_s, **kwargs)
