"""The Space as a visitor meets it, timed in a real browser (Debian's Chromium, driven by Playwright).

``python app.py`` is started with the Space's own model seat (no ``HAGGLE_MODEL``: the shipped buyer the numbers put
first, SmolLM2 GRPO) and the engine the measurements choose (``artifacts/benchmarks/engines.json``). Then, as a
visitor would:

* ``page_ready_s``: from the launch to the page drawn (the Play tab clickable);
* a game where the model buyer opens against the visitor as seller, started as soon as the page is ready:
  ``first_token_s`` (the model's reply is seen being written), ``first_reply_s`` (its reply is in), both from the
  click that starts the game; the seat loads and warms in the background from the app's start, so a visitor who
  comes early waits for that too (``--settle`` waits for the app to go idle first: a page opened later);
* "Out-haggle it" as the buyer, rising offers until the game ends: ``challenge_last_move_s``, from the click of
  the last move to the result with the model's and the expert's scores on the same game (replayed in the
  background from the challenge's start), moving as fast as the page answers (a robot), and
  ``challenge_last_move_s_paused`` with ``--pause-s`` between a seller's answer and the next offer (a person).

    python benchmarks/space_visitor.py        # writes artifacts/benchmarks/space_visitor.json
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import time

from app_speed import free_port, settle, start_app  # beside this script (its folder leads sys.path)
from training.common.provenance import benchmark_artifact

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def pick(page, dropdown: str, option: str) -> None:
    page.locator(f"#{dropdown} input").click()
    page.get_by_role("option", name=option, exact=True).filter(visible=True).first.click()


def model_opens(page) -> tuple[float, float]:
    """Seconds from the start click to the model's reply seen being written, and to the reply in."""
    page.get_by_role("tab", name="Play").click()
    pick(page, "play-buyer", "model")
    pick(page, "play-seller", "human")
    t0 = time.perf_counter()
    page.locator("#start-game").click()
    page.locator("#game-chat").get_by_text("(writing…)").first.wait_for(timeout=300_000)
    first_token = time.perf_counter() - t0
    page.wait_for_function("""() => [...document.querySelectorAll('#game-chat .message')]
        .some(m => m.innerText.includes('buyer:') && !m.innerText.includes('(writing…)'))""", timeout=300_000)
    return first_token, time.perf_counter() - t0


def challenge_last_move(page, pause_s: float = 0.0) -> float:
    """Seconds from the click of a challenge's last move (as the buyer) to its result on screen; ``pause_s`` between
    a seller's answer and the next offer (a person reading and typing)."""
    page.get_by_role("tab", name="Out-haggle it").click()
    page.locator("#ch-start").click()
    card = page.locator("#ch-card")
    card.get_by_text("Your budget (private)").wait_for(timeout=120_000)
    budget = float(re.search(r"Your budget \(private\): \$([\d,]+\.\d\d)", card.inner_text()).group(1).replace(",", ""))
    result, clicked = page.locator("#ch-result"), None
    for k in range(11):
        # the page is ready for the next move, or the last one ended the game (its result comes after the chat)
        page.wait_for_function("""() => document.querySelector('#ch-result').innerText.includes('leaderboard')
            || document.querySelector('.toast-body')
            || document.querySelector('#ch-price input')?.offsetParent""", timeout=300_000)
        if "leaderboard" in result.inner_text():
            return time.perf_counter() - clicked
        if page.locator(".toast-body").count() or k == 10:
            break
        time.sleep(pause_s if k else 0.0)
        before = page.locator("#ch-chat .message").count()
        page.locator("#ch-price input").fill(f"{budget * (0.55 + 0.07 * k):.2f}")
        page.locator("#ch-price input").press("Tab")
        clicked = time.perf_counter()
        page.locator("#ch-send").click()
        page.wait_for_function(f"""() => document.querySelector('#ch-result').innerText.includes('leaderboard')
            || document.querySelector('.toast-body')
            || [...document.querySelectorAll('#ch-chat .message')].length > {before} + 1""", timeout=300_000)
    raise RuntimeError("the challenge did not end within 10 moves (or a move was refused)")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--games", type=int, default=3, help="model-opened games (each in a fresh page)")
    ap.add_argument("--challenges", type=int, default=3, help="challenges played at once, and again with --pause-s")
    ap.add_argument("--pause-s", type=float, default=3.0, help="seconds a person takes between moves (second set)")
    ap.add_argument("--settle", action="store_true", help="wait for the app to go idle before the first game")
    ap.add_argument("--out", default="artifacts/benchmarks/space_visitor.json")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: Debian's chromium is needed (apt install chromium)")
    os.environ.pop("HAGGLE_MODEL", None)  # the Space's own seat
    start = time.perf_counter()
    port = free_port()
    proc, served_s = start_app(port)
    try:
        url = f"http://127.0.0.1:{port}/"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=ARGS)
            opened, firsts, settled = [], [], 0.0
            for g in range(args.games):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url, wait_until="load", timeout=120_000)
                page.get_by_role("tab", name="Play").wait_for(timeout=120_000)
                if g == 0:
                    ready_s = time.perf_counter() - start
                    if args.settle:
                        settled = settle(proc, limit_s=600)
                opened.append(model_opens(page))
                page.close()
            paused = []
            for pause, into in [(0.0, firsts)] * args.challenges + [(args.pause_s, paused)] * args.challenges:
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url, wait_until="load", timeout=120_000)
                into.append(challenge_last_move(page, pause))
                page.close()
            browser.close()
    finally:
        proc.kill()
    results = {"served_s": served_s, "page_ready_s": ready_s, "settled_s": settled,
               "first_token_s": [round(a, 2) for a, _ in opened], "first_reply_s": [round(b, 2) for _, b in opened],
               "first_reply_s_first_game": opened[0][1],
               "first_reply_s_median": statistics.median(b for _, b in opened),
               "challenge_last_move_s": [round(x, 2) for x in firsts],
               "challenge_last_move_s_median": statistics.median(firsts) if firsts else None,
               "challenge_last_move_s_paused": [round(x, 2) for x in paused],
               "challenge_last_move_s_paused_median": statistics.median(paused) if paused else None}
    print(results)
    return benchmark_artifact(args.out, vars(args), {"games": "drawn by the page (random seed)",
                                                     "challenges": "drawn by the server"}, start, results)


if __name__ == "__main__":
    main()
