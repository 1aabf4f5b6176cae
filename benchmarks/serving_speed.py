"""Throughput of the served environments against the same environments in-process and against a
trivial echo environment served the same way, in one run on one machine.

* ``inprocess_steps_per_s``: ``BargainEnvironment.step`` called directly (a step is one move of
  the served buyer plus the scripted seller's answer), the same policy and seeds as the clients.
* ``served_steps_per_s``: ``--sessions`` concurrent WebSocket sessions (the typed OpenEnv client,
  asyncio, one process) against ``python -m serving`` in its own process on loopback, each
  playing ``--episodes`` whole episodes; ``step_p50_ms``/``step_p99_ms`` are per-step latencies.
  ``served_equals_inprocess``: every served episode ended with the reward it has in-process.
* ``echo_served_steps_per_s``: the echo environment served the same way (``benchmarks/echo.py``), each
  session making as many steps as its bargain counterpart did. The target is served bargain
  throughput >= 0.9x echo (the serving cost is the framework's, not the environment's).
* ``replay_served_steps_per_s``: the served bargain without the game. A replay environment with
  the same action and observation types serves the same episodes from tapes recorded before the
  load: the framework validates the same actions, and each step still turns the action into
  protocol text, builds the same observation and sends the same payload. The game itself (the
  reply parsed, the rules, the seller's move, the view) is left out. ``replay_over_echo`` is
  what our serving layer costs over the echo round trip. ``served_over_echo`` adds the game on
  top of that.
* ``server_cpu_us_per_step`` / ``client_cpu_us_per_step``: CPU seconds each process spent per
  served step (Linux ``/proc``), which splits each round trip between server and client.
  ``game_budget_us_per_step`` is what the target leaves the game: the echo server's CPU per step
  times (1/0.9 - 1). ``additive_bound_over_echo`` is the ratio an environment with this
  in-process step cost would reach if serving added nothing but the echo round trip.
* ``market``: the GPU market served the same way (``--env market``, lab 0 played by the rule
  expert from the served view, ``--market-task``), in-process and served, with its latencies.

Each configuration runs ``--repeats`` times, interleaved; the best run of each counts, and every
run's throughput is kept under ``runs``.

    python benchmarks/serving_speed.py          # writes artifacts/benchmarks/serving.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import httpx
from openenv.core.env_server import Environment
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import WSObservationResponse

from echo import EchoAction, EchoClient, EchoEnvironment
from env.market.play import seat_rng
from env.market.players import make_policy
from serving.app import build_app, serve as serve_app
from serving.bargain import BargainAction, BargainEnvironment, BargainObservation, BargainState
from serving.base import InlineSteps
from serving.client import BargainClient, MarketClient
from serving.market import MarketAction, MarketEnvironment
from training.common.provenance import provenance, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.9
ECHO_MESSAGE = "Talk: How about this?\nAction: [BUY] $40.00"


def policy(obs, k: int) -> BargainAction:
    """Rising offers; accept an ask within 85% of the budget."""
    if obs.their_offer is not None and obs.their_offer <= 0.85 * obs.private_value:
        return BargainAction(kind="DEAL", price=obs.their_offer, talk="deal")
    return BargainAction(kind="BUY", price=round(obs.private_value * (0.5 + 0.07 * k), 2), talk=f"offer {k}")


def seed_of(session: int, episode: int) -> int:
    """Session s plays episodes with seeds 10000s+e."""
    return 10_000 * session + episode


def seeds(sessions: int, episodes: int) -> list[int]:
    return [seed_of(s, e) for s in range(sessions) for e in range(episodes)]


def play_bargain(env: BargainEnvironment, seed: int) -> list[BargainObservation]:
    """One episode in-process under ``policy``: every observation the buyer gets."""
    obs, k = env.reset(seed=seed), 0
    seen = [obs]
    while not obs.done:
        obs = env.step(policy(obs, k))
        seen.append(obs)
        k += 1
    return seen


class ReplayEnvironment(InlineSteps, Environment[BargainAction, BargainObservation, BargainState]):
    """The served bargain minus the game: replays episodes recorded in-process (``TAPES``, by
    seed). A step still does the serving layer's own work: it takes the validated action, writes
    its protocol text and builds the typed observation. It does not parse, judge or answer."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    TAPES: dict[int, list[dict]] = {}

    def __init__(self):
        super().__init__()
        self._tape: list[dict] = []
        self._i = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **_: Any) -> BargainObservation:
        self._tape, self._i = self.TAPES[seed], 0
        return BargainObservation(**self._tape[0])

    def step(self, action: BargainAction, timeout_s: Optional[float] = None, **_: Any) -> BargainObservation:
        action.text("option_a")
        self._i += 1
        return BargainObservation(**self._tape[self._i])

    @property
    def state(self) -> BargainState:
        return BargainState(step_count=self._i)


def serve_replay(port: int, sessions: int, episodes: int) -> None:
    env = BargainEnvironment()
    ReplayEnvironment.TAPES = {seed: [o.model_dump() for o in play_bargain(env, seed)]
                               for seed in seeds(sessions, episodes)}
    # every benchmark session comes from this one machine: the per-client share is the whole cap
    serve_app(build_app((ReplayEnvironment, BargainAction, BargainObservation), sessions + 8,
                        per_client=sessions + 8), port=port)


def market_driver(task: str, seed: int):
    """Lab 0 as the rule expert, acting from the (served or in-process) view alone."""
    expert, started = make_policy("expert"), False

    def act(obs) -> MarketAction:
        nonlocal started
        if not started:
            expert.reset(obs.view, seat_rng(task, seed, 0))
            started = True
        return MarketAction(move=expert.act(obs.view))
    return act


def free_port() -> int:
    import socket  # noqa: PLC0415
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(name: str, port: int, args) -> subprocess.Popen:
    if name == "replay":
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve-replay", str(port), "--sessions",
               str(args.sessions), "--episodes", str(args.episodes)]
    elif name == "echo":
        cmd = [sys.executable, str(Path(__file__).resolve().parent / "echo.py"), "--port", str(port),
               "--max-sessions", str(args.sessions + 8)]
    else:
        cap = str(max(args.sessions, args.market_sessions) + 8)
        cmd = [sys.executable, "-m", "serving", "--env", name, "--port", str(port), "--max-sessions", cap,
               "--per-client-sessions", cap]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{name} server did not start")


def cpu_s(pid: int | None = None) -> float | None:
    """CPU seconds (user + system) of process ``pid``, or of this process."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- sessions
async def bargain_session(client_cls, url: str, s: int, episodes: int, lat: list[float]):
    async with client_cls(base_url=url) as client:
        steps, rewards = 0, []
        for e in range(episodes):
            result, k = await client.reset(seed=seed_of(s, e)), 0
            while not result.done:
                t = time.perf_counter()
                result = await client.step(policy(result.observation, k))
                lat.append(time.perf_counter() - t)
                k, steps = k + 1, steps + 1
            rewards.append(result.reward)
        return steps, rewards


async def echo_session(url: str, steps: int, episodes: int, lat: list[float]):
    async with EchoClient(base_url=url) as client:
        per = max(1, steps // episodes)
        done = 0
        for e in range(episodes):
            await client.reset(seed=e)
            for _ in range(per if e < episodes - 1 else steps - done):
                t = time.perf_counter()
                await client.step(EchoAction(message=ECHO_MESSAGE))
                lat.append(time.perf_counter() - t)
                done += 1
        return done, []


async def market_session(url: str, task: str, s: int, episodes: int, lat: list[float]):
    async with MarketClient(base_url=url) as client:
        steps, totals = 0, []
        for e in range(episodes):
            act = market_driver(task, seed_of(s, e))
            result = await client.reset(seed=seed_of(s, e), task=task)
            while not result.done:
                t = time.perf_counter()
                result = await client.step(act(result.observation))
                lat.append(time.perf_counter() - t)
                steps += 1
            totals.append(result.observation.total_reward)
        return steps, totals


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def measure(pid: int, sessions) -> dict:
    """Run the sessions (coroutine factories taking a latency list) at once; one run's figures."""
    async def go():
        lat: list[float] = []
        out = await asyncio.gather(*(session(lat) for session in sessions))
        return out, lat
    s0, c0, t0 = cpu_s(pid), cpu_s(), time.perf_counter()
    out, lat = asyncio.run(go())
    wall, s1, c1 = time.perf_counter() - t0, cpu_s(pid), cpu_s()
    steps = sum(n for n, _ in out)
    return {"steps": steps, "wall_s": wall, "steps_per_s": steps / wall, "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99), "server_cpu_us_per_step": None if s0 is None else 1e6 * (s1 - s0) / steps,
            "client_cpu_us_per_step": 1e6 * (c1 - c0) / steps, "per_session": out}


# ---------------------------------------------------------------------- in-process
def inprocess_bargain(all_seeds: list[int]) -> tuple[float, dict[int, float]]:
    env, steps, rewards = BargainEnvironment(), 0, {}
    t0 = time.perf_counter()
    for seed in all_seeds:
        seen = play_bargain(env, seed)
        steps += len(seen) - 1
        rewards[seed] = seen[-1].reward
    return steps / (time.perf_counter() - t0), rewards


def inprocess_market(task: str, all_seeds: list[int]) -> tuple[float, dict[int, float]]:
    env, steps, totals = MarketEnvironment(), 0, {}
    t0 = time.perf_counter()
    for seed in all_seeds:
        act = market_driver(task, seed)
        obs = env.reset(seed=seed, task=task)
        while not obs.done:
            obs = env.step(act(obs))
            steps += 1
        totals[seed] = obs.total_reward
    return steps / (time.perf_counter() - t0), totals


def payload_bytes(all_seeds: list[int]) -> dict[str, dict[str, float]]:
    """Mean bytes of a step's WebSocket messages each way (what the framework carries), bargain
    (and replay, the same messages) against echo. The clients only format; they never connect."""
    def sent(payload: dict) -> int:
        return len(json.dumps({"type": "step", "data": payload}).encode())

    def received(obs) -> int:
        return len(WSObservationResponse(data=serialize_observation(obs)).model_dump_json().encode())

    bargain, echo_client = BargainClient(base_url="http://127.0.0.1:9"), EchoClient(base_url="http://127.0.0.1:9")
    env, up, down = BargainEnvironment(), [], []
    for seed in all_seeds:
        seen = play_bargain(env, seed)
        up += [sent(bargain._step_payload(policy(obs, k))) for k, obs in enumerate(seen[:-1])]
        down += [received(obs) for obs in seen[1:]]
    echo = EchoAction(message=ECHO_MESSAGE)
    return {"bargain": {"to_server": sum(up) / len(up), "to_client": sum(down) / len(down)},
            "echo": {"to_server": sent(echo_client._step_payload(echo)),
                     "to_client": received(EchoEnvironment().step(echo))}}


def by_seed(per_session: list) -> dict[int, float]:
    """Each served episode's final reward by seed."""
    return {seed_of(s, e): r for s, (_, rs) in enumerate(per_session) for e, r in enumerate(rs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--episodes", type=int, default=5, help="episodes per session")
    ap.add_argument("--market-task", default="market_round")
    ap.add_argument("--market-sessions", type=int, default=100)
    ap.add_argument("--market-episodes", type=int, default=2, help="market episodes per session")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "benchmarks" / "serving.json"))
    ap.add_argument("--serve-replay", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_replay:
        return serve_replay(args.serve_replay, args.sessions, args.episodes)
    if min(args.sessions, args.episodes, args.market_sessions, args.market_episodes, args.repeats) < 1:
        ap.error("--sessions, --episodes, --market-sessions, --market-episodes and --repeats must be >= 1")
    t_start = time.perf_counter()
    names = ("bargain", "replay", "echo", "market")
    ports = {name: free_port() for name in names}
    url = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
    procs = {}
    try:
        for name in names:
            procs[name] = start_server(name, ports[name], args)
        bargain_seeds = seeds(args.sessions, args.episodes)
        market_seeds = seeds(args.market_sessions, args.market_episodes)
        inproc, inproc_rewards = max((inprocess_bargain(bargain_seeds) for _ in range(args.repeats)),
                                     key=lambda r: r[0])
        market_inproc, market_totals = max((inprocess_market(args.market_task, market_seeds)
                                            for _ in range(args.repeats)), key=lambda r: r[0])
        best: dict[str, dict] = {}
        runs: dict[str, list[float]] = {name: [] for name in names}
        equal = {"bargain": True, "replay": True, "market": True}
        for r in range(args.repeats):
            session = {
                "bargain": [lambda lat, s=s: bargain_session(BargainClient, url["bargain"], s, args.episodes, lat)
                            for s in range(args.sessions)],
                "replay": [lambda lat, s=s: bargain_session(BargainClient, url["replay"], s, args.episodes, lat)
                           for s in range(args.sessions)],
                "market": [lambda lat, s=s: market_session(url["market"], args.market_task, s, args.market_episodes,
                                                           lat) for s in range(args.market_sessions)]}
            for name in names:
                if name == "echo":  # as many steps per session as its bargain counterpart made
                    counts = [n for n, _ in best["bargain"]["per_session"]]
                    session["echo"] = [lambda lat, n=n: echo_session(url["echo"], n, args.episodes, lat)
                                       for n in counts]
                run = measure(procs[name].pid, session[name])
                if name != "echo":
                    equal[name] &= by_seed(run["per_session"]) == (market_totals if name == "market"
                                                                   else inproc_rewards)
                runs[name].append(round(run["steps_per_s"], 1))
                if name not in best or run["steps_per_s"] > best[name]["steps_per_s"]:
                    best[name] = run
            print(f"repeat {r + 1}: " + ", ".join(f"{n} {runs[n][-1]:.0f}" for n in names) + " steps/s",
                  file=sys.stderr)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait()
    b, e, rp, m = best["bargain"], best["echo"], best["replay"], best["market"]
    echo_cpu = e["server_cpu_us_per_step"]
    results = {
        "inprocess_steps_per_s": inproc, "served_steps_per_s": b["steps_per_s"],
        "step_p50_ms": b["p50_ms"], "step_p99_ms": b["p99_ms"],
        "served_equals_inprocess": equal["bargain"],
        "echo_served_steps_per_s": e["steps_per_s"], "echo_step_p50_ms": e["p50_ms"], "echo_step_p99_ms": e["p99_ms"],
        "replay_served_steps_per_s": rp["steps_per_s"], "replay_step_p50_ms": rp["p50_ms"],
        "replay_step_p99_ms": rp["p99_ms"], "replay_equals_inprocess": equal["replay"],
        "served_over_echo": b["steps_per_s"] / e["steps_per_s"],
        "replay_over_echo": rp["steps_per_s"] / e["steps_per_s"],
        "target_served_over_echo": TARGET_RATIO,
        "sessions": args.sessions, "episodes_per_session": args.episodes, "served_steps": b["steps"],
        "server_cpu_us_per_step": {n: best[n]["server_cpu_us_per_step"] for n in names},
        "client_cpu_us_per_step": {n: best[n]["client_cpu_us_per_step"] for n in names},
        "game_inprocess_us_per_step": 1e6 / inproc,
        "payload_bytes_per_step": payload_bytes(bargain_seeds[:200]),
        "game_budget_us_per_step": None if echo_cpu is None else echo_cpu * (1 / TARGET_RATIO - 1),
        # If serving added nothing of ours, a served step would cost the echo round trip plus the
        # environment's own in-process work: the best ratio this environment could reach here.
        "additive_bound_over_echo": (1 / e["steps_per_s"]) / (1 / e["steps_per_s"] + 1 / inproc),
        "market": {"task": args.market_task, "sessions": args.market_sessions,
                   "episodes_per_session": args.market_episodes, "served_steps": m["steps"],
                   "inprocess_steps_per_s": market_inproc, "served_steps_per_s": m["steps_per_s"],
                   "step_p50_ms": m["p50_ms"], "step_p99_ms": m["p99_ms"],
                   "served_equals_inprocess": equal["market"],
                   "served_over_echo": m["steps_per_s"] / e["steps_per_s"]},
        "runs": runs,
    }
    results["meets_target"] = results["served_over_echo"] >= TARGET_RATIO
    write_json(args.out, {"provenance": provenance(
        {k: v for k, v in vars(args).items() if k != "serve_replay"},
        {"episodes": "session s, episode e: seed 10000s+e (bargain, replay and market; the in-process runs play "
                     "the same seeds)"}, time.perf_counter() - t_start), "results": results})
    for k, v in results.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
