"""Haggle's Space: the bilateral negotiation, live games, evaluation and training results.

Wiring only: ``space.api`` holds the functions (each also a named API endpoint for
``gradio_client``, and an MCP tool with ``gradio[mcp]``), ``space.ui`` the page's tabs,
``space.bargain`` and ``space.market`` run live games (one per session id), ``space.figures`` turns
``artifacts/`` into tables and figures, ``space.model`` seats the trained model. Every number shown
comes from the environment itself or from a file in ``artifacts/``.

    python app.py            # serves on http://127.0.0.1:7860 (offline, CPU)
"""

import logging
import os
import threading

from env.bargain.protocol import REASONING_MODES
from space import figures as F
from space import model as seat
from space.api import (  # noqa: F401
    API,
    CHALLENGES,
    GAMES,
    MARKETS,
    challenge_reply,
    challenge_start,
    evaluate_policy,
    game_state,
    leaderboard,
    list_artifacts,
    list_scenarios,
    market_act,
    market_evaluate,
    market_play,
    market_schema,
    market_start,
    market_state,
    mcp_results_as_json,
    play_episode,
    read_artifact,
    send_reply,
    start_game,
)
from space.ui import (  # noqa: F401
    CSS,
    api_entry,
    api_example,
    before_after_buyers,
    before_after_file,
    build,
    models_overview,
    players_table,
    product_choices,
    scenario_stats,
    sft_sample,
    ui_artifact,
    ui_before_after,
    ui_market_start,
    ui_send,
    ui_start,
)

mcp_results_as_json()
log = logging.getLogger("haggle.space")


def warm_up() -> threading.Thread:
    """Load the model seat (its engine export included) and build the slow, fixed views (the SFT sample loads a
    model and replays an expert game, several seconds) in the background at start, so a visitor's first reply
    and first click find them ready. A seat that cannot load here is said in the log; its games say why."""

    def work():
        try:
            log.info("model seat warm: %s", seat.warm())
        except Exception as exc:  # noqa: BLE001 - the seat's own games report the failure to the visitor
            log.warning("model seat not warmed: %s", exc)
        for mode in REASONING_MODES:
            sft_sample(mode)

    thread = threading.Thread(target=work, daemon=True, name="warm-up")
    thread.start()
    return thread


def launch(**kwargs):
    mcp = kwargs.pop("mcp_server", None)
    if mcp is None:
        try:
            import mcp as _mcp  # noqa: F401, PLC0415
            mcp = True
        except ImportError:
            mcp = False
    block = not kwargs.pop("prevent_thread_lock", False)
    # uvicorn would take X-Forwarded-For from any local client as its address: the per-client share of
    # live games reads the real peer, and the forwarded address only from the proxies space/sessions.py
    # trusts ($HAGGLE_TRUSTED_PROXIES; the Space's own proxy on Hugging Face)
    os.environ.setdefault("FORWARDED_ALLOW_IPS", "")
    served = demo.launch(mcp_server=mcp, allowed_paths=[str(F.ARTIFACTS)], prevent_thread_lock=True, css=CSS, **kwargs)
    warm_up()  # once the page is served: its model loading would hold the interpreter while the server starts
    if block:
        demo.block_thread()
    return served


demo = build()  # the Space's app (Gradio's convention: a module-level ``demo``)
demo.queue(default_concurrency_limit=None)

if __name__ == "__main__":
    launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))

