"""What the served games share: the errors a request can meet and inline steps."""

from __future__ import annotations

from typing import Any, Optional


class EpisodeNotStarted(RuntimeError):
    """``step`` before ``reset``, or after the episode ended (HTTP 409)."""


class BadReset(ValueError):
    """Reset options the environment cannot take (HTTP 400)."""


class InlineSteps:
    """Run ``reset``/``step`` on the server's event loop instead of a per-session thread: they are
    short, pure CPU (tens of microseconds), so a thread hand-off would cost more than the work."""

    async def reset_async(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    async def step_async(self, action, timeout_s: Optional[float] = None, **kwargs: Any):
        return self.step(action, timeout_s=timeout_s, **kwargs)
