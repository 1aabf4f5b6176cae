"""Model players behind an OpenAI-compatible chat endpoint (a local server that speaks the
protocol), and model players through the evaluation command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from training import evaluate
from training.games.bargain.config import BargainEvalArgs

ROOT = Path(__file__).resolve().parent.parent


class ChatHandler(BaseHTTPRequestHandler):
    """A served 'model' that haggles by rule: offers 60% of its budget, accepts asks within it."""

    requests: list = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ChatHandler.requests.append({"auth": self.headers.get("Authorization"), "path": self.path, "body": body})
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.end_headers()
            return
        msgs = body["messages"]
        budget = float(re.search(r"Your budget: \$([\d,.]+)", msgs[0]["content"]).group(1).replace(",", ""))
        ask = re.findall(r"\[SELL\] \$([\d,.]+)", msgs[-1]["content"])
        if ask and float(ask[-1].replace(",", "")) <= budget:
            content = f"Talk: Deal.\nAction: [DEAL] ${ask[-1]}"
        else:
            turn = sum(m["role"] == "assistant" for m in msgs)
            content = f"Talk: How about this?\nAction: [BUY] ${budget * (0.6 + 0.05 * turn):.2f}"
        reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                 "choices": [{"index": 0, "finish_reason": "stop",
                              "message": {"role": "assistant", "content": content,
                                          "reasoning_content": "PRIVATE-ENDPOINT-REASONING"}}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    ChatHandler.requests = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ChatHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_endpoint_buyer_through_the_evaluation_harness(server, tmp_path, monkeypatch):
    monkeypatch.setenv("HAGGLE_TEST_KEY", "sk-test-123")
    cfg = BargainEvalArgs(scenarios="builtin", buyer_model="served-haggler", base_url=server,
                              api_key_env="HAGGLE_TEST_KEY", sellers="neutral,conceder", seeds=1, limit=4,
                              out=str(tmp_path / "e.json"), transcripts=str(tmp_path / "t.jsonl"), progress=False)
    art = evaluate.run(cfg)
    rows = {r["seller"]: r for r in art["rows"] if r["buyer"] == "served-haggler"}
    assert set(rows) == {"neutral", "conceder", "mix"}
    assert {r["buyer"] for r in art["rows"]} == {"served-haggler", "oracle"}, "the oracle's ceiling beside it"
    assert rows["mix"]["episodes"] == 8 and rows["mix"]["format_error_rate"] == 0
    assert rows["mix"]["deal_rate"] > 0
    reqs = ChatHandler.requests
    assert reqs and all(r["auth"] == "Bearer sk-test-123" for r in reqs)
    assert all(r["body"]["model"] == "served-haggler" for r in reqs)
    seen = json.dumps([r["body"]["messages"] for r in reqs])
    assert "Your cost" not in seen and "PRIVATE-ENDPOINT-REASONING" not in seen
    line = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])
    assert any(t["thought"] == "PRIVATE-ENDPOINT-REASONING" for t in line["turns"] if t["role"] == "buyer")


def test_endpoint_failure_is_an_error_not_a_move(tmp_path):
    cfg = BargainEvalArgs(scenarios="builtin", buyer_model="m", base_url="http://127.0.0.1:9/v1", sellers="neutral",
                              seeds=1, limit=1, out="", transcripts="", progress=False)
    with pytest.raises(RuntimeError, match="chat endpoint"):
        evaluate.run(cfg, sampling=evaluate.SamplingConfig(max_new_tokens=8))


@pytest.mark.slow
def test_model_players_from_the_command_line(tiny_dir, tmp_path):
    env = {**os.environ, "HAGGLE_TINY_DIR": str(tiny_dir)}
    out = tmp_path / "base.json"
    proc = subprocess.run([sys.executable, "training/evaluate.py", "--scenarios", "builtin", "--buyer-model", "tiny",
                           "--buyer-name", "base", "--sellers", "neutral,begging", "--seeds", "1", "--limit", "3",
                           "--max-new-tokens", "16", "--out", str(out), "--transcripts", "", "--no_progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    art = json.loads(out.read_text())
    mix = next(r for r in art["rows"] if r["seller"] == "mix")
    assert mix["buyer"] == "base" and mix["episodes"] == 6
    assert art["provenance"]["config"]["sampling"]["max_new_tokens"] == 16
    # an untrained model writes no valid move: the environment scores every episode -1
    assert mix["format_error_rate"] == 1.0 and mix["reward_mean"] == -1.0
    proc = subprocess.run([sys.executable, "training/evaluate.py", "--scenarios", "builtin", "--seller-model",
                           str(tiny_dir), "--buyers", "expert", "--seeds", "1", "--limit", "2", "--max-new-tokens",
                           "8", "--reasoning-mode", "option_b", "--think-tokens", "8", "--out", str(out),
                           "--transcripts", "", "--no_progress"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = json.loads(out.read_text())["rows"][0]
    assert row["buyer"] == "expert" and row["episodes"] == 2 and row["overshoot_rate"] == 0
