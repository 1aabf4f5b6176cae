"""How fast the Space starts and answers, measured on this machine in one run.

* ``first_page_s``: from launching ``python app.py`` (a fresh process: imports, artifact
  reading, page build) to the first ``200`` for ``/`` with the page's HTML; median of
  ``--starts`` launches.
* ``step_*``: latency of one game step through the API, ``send_reply`` (a person's move plus
  the scripted seller's answer), with ``--clients`` concurrent clients on loopback, each in
  its own session playing whole games back to back (no think time). Clients call the direct
  HTTP route ``/gradio_api/run/<endpoint>`` with their own ``session_hash``, as any HTTP client
  can; ``episode_*`` is the same for ``play_episode`` (a whole scripted game per call).
* ``gradio_client_*``: the same ``play_episode`` calls through ``gradio_client`` (which always
  goes through Gradio's queue and an event stream), from as many client threads. Reported for
  comparison: that path's cost is the protocol's, and its client threads share these CPUs.

    python benchmarks/app_speed.py          # writes artifacts/benchmarks/app.json
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from training.common.provenance import provenance, write_json

ROOT = Path(__file__).resolve().parent.parent
TARGET_FIRST_PAGE_S = 10.0
TARGET_STEP_P50_MS = 100.0


def free_port() -> int:
    import socket  # noqa: PLC0415
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, root: Path = ROOT) -> tuple[subprocess.Popen, float]:
    """Launch ``python app.py`` (of the checkout ``root``) and time it until ``/`` serves the page."""
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "PYTHONPATH": str(root)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=root, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"app.py exited with {proc.returncode} before serving")
        try:
            r = httpx.get(url, timeout=2)
            if r.status_code == 200 and "gradio" in r.text.lower():
                return proc, time.perf_counter() - t0
        except httpx.TransportError:
            pass
        if time.perf_counter() - t0 > 120:
            proc.kill()
            raise RuntimeError("app.py did not serve its first page within 120 s")
        time.sleep(0.02)


def settle(proc: subprocess.Popen, idle_share: float = 0.1, window_s: float = 0.5, limit_s: float = 60.0) -> float:
    """Wait until the app is idle (under ``idle_share`` of one core over ``window_s``: its background
    warm-up has finished), so that step latency is the steady state's; seconds waited."""
    import psutil  # noqa: PLC0415  (installed with accelerate)
    p, t0 = psutil.Process(proc.pid), time.perf_counter()
    used = lambda: sum(p.cpu_times()[:2])  # noqa: E731
    before = used()
    while time.perf_counter() - t0 < limit_s:
        time.sleep(window_s)
        now = used()
        if now - before < idle_share * window_s:
            break
        before = now
    return time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


async def _client(http: httpx.AsyncClient, base: str, k: int, steps: int, lat_step: list, lat_episode: list):
    """One API client: plays games as the buyer (rising offers) until it has made ``steps`` moves,
    then plays ``steps // 4`` whole scripted games."""
    session_hash = f"bench-{k}"

    async def call(endpoint: str, *data):
        r = await http.post(f"{base}gradio_api/run/{endpoint}", json={"data": list(data), "session_hash": session_hash})
        r.raise_for_status()
        return r.json()["data"][0]

    made, game = 0, 0
    while made < steps:
        state = await call("start_game", "human", "neutral", "builtin", -1, 1000 * k + game, "option_a")
        game += 1
        i = 0
        while not state["done"] and made < steps:
            t = time.perf_counter()
            state = await call("send_reply", state["session_id"], "offer", round(state["budget"] * (0.5 + 0.08 * i), 2),
                               "How about this?")
            lat_step.append(time.perf_counter() - t)
            made, i = made + 1, i + 1
    for j in range(max(1, steps // 4)):
        t = time.perf_counter()
        await call("play_episode", "expert", "neutral", "builtin", j % 50, k, "option_a")
        lat_episode.append(time.perf_counter() - t)


async def api_latency(base: str, clients: int, steps: int) -> tuple[list[float], list[float], float]:
    lat_step: list[float] = []
    lat_episode: list[float] = []
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=clients)) as http:
        await _client(http, base, 999, 8, [], [])  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(_client(http, base, k, steps, lat_step, lat_episode) for k in range(clients)))
    return lat_step, lat_episode, time.perf_counter() - t0


def gradio_client_latency(base: str, clients: int, calls: int) -> list[float]:
    from gradio_client import Client  # noqa: PLC0415

    lat: list[float] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        c = Client(base, verbose=False)
        for j in range(calls):
            t = time.perf_counter()
            c.predict(buyer="expert", seller="neutral", product=j % 50, seed=k, api_name="/play_episode")
            with lock:
                lat.append(time.perf_counter() - t)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return lat


def measure(root: Path, args, firsts: list[float]) -> dict:
    """The latency half of the benchmark for the checkout ``root``, after one more timed start."""
    port = free_port()
    proc, seconds = start_app(port, root)
    firsts.append(seconds)
    settled = settle(proc)
    base = f"http://127.0.0.1:{port}/"
    try:
        steps, episodes, wall = asyncio.run(api_latency(base, args.clients, args.steps))
        gc = gradio_client_latency(base, args.clients, args.gradio_client_calls)
    finally:
        proc.terminate()
        proc.wait()
    return {
        "first_page_s": statistics.median(firsts), "first_page_runs_s": firsts, "settled_after_first_page_s": settled,
        "step_p50_ms": pct(steps, 0.5), "step_p99_ms": pct(steps, 0.99), "steps": len(steps),
        "steps_per_s": len(steps) / wall, "episode_p50_ms": pct(episodes, 0.5), "episode_p99_ms": pct(episodes, 0.99),
        "gradio_client_episode_p50_ms": pct(gc, 0.5), "gradio_client_episode_p99_ms": pct(gc, 0.99),
        "concurrent_clients": args.clients,
    }


def _commit(root: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=3, help="launches of app.py timed for first_page_s")
    ap.add_argument("--clients", type=int, default=20, help="concurrent API clients")
    ap.add_argument("--steps", type=int, default=40, help="moves per client")
    ap.add_argument("--gradio-client-calls", type=int, default=10, help="play_episode calls per gradio_client thread")
    ap.add_argument("--compare", default="", help="another checkout (e.g. `git worktree add /tmp/base REV`) measured "
                    "in the same run, starts interleaved with this one's: ratios this / that")
    ap.add_argument("--out", default=str(ROOT / "artifacts" / "benchmarks" / "app.json"))
    args = ap.parse_args()
    t_start = time.perf_counter()
    roots = [ROOT] + ([Path(args.compare).resolve()] if args.compare else [])
    firsts: dict[Path, list[float]] = {r: [] for r in roots}
    for i in range(args.starts - 1):  # the last start of each checkout is measure()'s
        for root in roots:
            proc, seconds = start_app(free_port(), root)
            proc.terminate()
            proc.wait()
            firsts[root].append(seconds)
            print(f"{root.name} start {i + 1}: first page after {seconds:.2f} s", file=sys.stderr)
    measured = {root: measure(root, args, firsts[root]) for root in roots}
    results = measured[ROOT]
    results["targets"] = {"first_page_s": TARGET_FIRST_PAGE_S, "step_p50_ms": TARGET_STEP_P50_MS}
    results["meets_targets"] = results["first_page_s"] < TARGET_FIRST_PAGE_S and results["step_p50_ms"] < TARGET_STEP_P50_MS
    if args.compare:
        other = measured[roots[1]]
        results["compared_with"] = {"checkout": str(roots[1]), "commit": _commit(roots[1]), "results": other,
                                    "ratios_this_over_that": {k: results[k] / other[k] for k in
                                                              ("first_page_s", "step_p50_ms", "step_p99_ms",
                                                               "episode_p50_ms") if other[k]}}
    config = vars(args) | {"endpoint_step": "send_reply (human buyer vs scripted neutral seller)",
                           "endpoint_episode": "play_episode (expert vs neutral)", "route": "/gradio_api/run/<name>",
                           "steady_state": "latency measured once the app is idle after its start (settle())"}
    write_json(args.out, {"provenance": provenance(config, {"games": "client k, game g: seed 1000k+g"},
                                                   time.perf_counter() - t_start), "results": results})
    for k, v in results.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    main()
