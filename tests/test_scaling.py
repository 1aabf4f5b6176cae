"""Scaling out: the accelerate configs load, and SFT and GRPO run data parallel with two CPU
processes (gloo, started by ``accelerate launch``): the processes play disjoint shares of each step's
episodes that together are the single-process set, groups stay whole, and only one process writes."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from training.engine.backends import SamplingConfig, TransformersBackend

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "configs" / "accelerate"
EXPECTED = {"single_gpu.yaml": "NO", "multi_gpu.yaml": "MULTI_GPU", "fsdp.yaml": "FSDP",
            "deepspeed_zero2.yaml": "DEEPSPEED", "deepspeed_zero3.yaml": "DEEPSPEED", "cpu_2proc.yaml": "MULTI_CPU"}


def test_every_accelerate_config_loads_and_the_readme_launches_each():
    from accelerate.commands.config.config_args import load_config_from_file
    assert {p.name for p in CONFIGS.glob("*.yaml")} == set(EXPECTED)
    readme = (ROOT / "training" / "README.md").read_text()
    for name, kind in EXPECTED.items():
        cfg = load_config_from_file(str(CONFIGS / name))
        assert cfg.distributed_type.value == kind, name
        assert f"configs/accelerate/{name}" in readme, f"training/README.md's Scaling out section does not use {name}"
    zero3 = load_config_from_file(str(CONFIGS / "deepspeed_zero3.yaml"))
    assert zero3.deepspeed_config["zero_stage"] == 3 and zero3.deepspeed_config["zero3_save_16bit_model"]
    assert load_config_from_file(str(CONFIGS / "cpu_2proc.yaml")).use_cpu


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path, script, *args, processes=2):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if processes == 1:
        cmd = [sys.executable, script, *args]
    else:  # accelerate launch starts the processes (through torchrun); finding no GPU, the scripts train on
        # CPU and Accelerate joins them over gloo (`--cpu` would start several CPU processes only through mpirun)
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
               str(_free_port()), script, *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.slow
def test_sft_smoke_runs_with_two_processes_and_writes_the_single_process_schema(tmp_path, tiny_dir):
    runs = {}
    for n in (1, 2):
        out, curve = tmp_path / f"sft{n}", tmp_path / f"sft{n}.json"
        _launch(tmp_path, "training/sft.py", "--smoke", "--model", str(tiny_dir), "--output_dir", str(out),
                "--curve", str(curve), processes=n)
        assert (out / "final" / "model.safetensors").is_file() and (out / "final" / "lineage.json").is_file()
        runs[n] = json.loads(curve.read_text())
    assert runs[2]["provenance"]["config"]["world_size"] == 2 and runs[1]["provenance"]["config"]["world_size"] == 1
    assert set(runs[1]) == set(runs[2]) and set(runs[1]["points"][0]) == set(runs[2]["points"][0])


@pytest.mark.slow
def test_grpo_with_two_processes_splits_each_steps_episodes_without_overlap_or_loss(tmp_path, tiny_dir):
    played, curves = {}, {}
    for n in (1, 2):
        log, curve = tmp_path / f"episodes{n}", tmp_path / f"grpo{n}.json"
        _launch(tmp_path, "training/grpo.py", "--smoke", "--model_name_or_path", str(tiny_dir),
                "--output_dir", str(tmp_path / f"grpo{n}"), "--curve", str(curve), "--episode_log", str(log),
                "--per_device_train_batch_size", str(4 // n), processes=n)  # the same episodes per step in all
        lines = [json.loads(x) for f in sorted(tmp_path.glob(f"episodes{n}.rank*.jsonl")) for x in f.read_text().split("\n")
                 if x]
        assert {x["process"] for x in lines} == set(range(n))
        played[n], curves[n] = lines, json.loads(curve.read_text())
    for step in {x["step"] for x in played[1]}:
        one = collections.Counter((x["row"], json.dumps(x["episode"])) for x in played[1] if x["step"] == step)
        two = [x for x in played[2] if x["step"] == step]
        assert collections.Counter((x["row"], json.dumps(x["episode"])) for x in two) == one, \
            "the two processes together play exactly the single-process episodes"
        per_process = [collections.Counter(x["row"] for x in two if x["process"] == k) for k in (0, 1)]
        assert sum(per_process[0].values()) == sum(per_process[1].values()), "an even split"
        for row in one:  # a group (one dataset row: scenario, seller, seed) has the same episode everywhere
            assert len({json.dumps(x["episode"]) for x in two if x["row"] == row[0]}) == 1
    points = curves[2]["points"]
    assert curves[2]["provenance"]["config"]["world_size"] == 2
    assert all(p["processes"] == 2 and p["episodes"] == q["episodes"] for p, q in zip(points, curves[1]["points"]))
    assert set(points[0]) == set(curves[1]["points"][0])


class ServerAnswers:
    """Stands in for ``trl vllm-serve`` behind TRL's ``VLLMClient.generate``: the answer is the real
    tiny model's greedy generation for the request, in the client's output shape; every request is
    kept so the test can read what the trainer's rollouts send."""

    def __init__(self, model, tok):
        self.engine = TransformersBackend(model, tok, SamplingConfig(temperature=0))
        self.requests, self.urls = [], []

    def __call__(self, base_url, connection_timeout):  # the client a non-main process builds
        self.urls.append((base_url, connection_timeout))
        return self

    def generate(self, prompts, n, temperature, top_p, top_k, max_tokens, logprobs, generation_kwargs):
        self.requests.append({"prompts": prompts, "n": n, "temperature": temperature, "max_tokens": max_tokens,
                              "logprobs": logprobs, **generation_kwargs})
        comps = self.engine.generate_ids(prompts, max_tokens, generation_kwargs["stop_token_ids"])
        return {"prompt_ids": prompts, "completion_ids": [c.ids for c in comps],
                "logprobs": [[[lp] for lp in c.logprobs] for c in comps]}


def test_grpo_with_use_vllm_server_generates_every_turn_through_the_server(tiny, monkeypatch):
    """The vLLM server path (untested against vLLM without a GPU): the configuration the trainer gets
    from the command line, and the requests its multi-turn rollouts send. Each process asks the server
    itself (token-id prompts, one completion each, its own seed, the reply's stop ids); greedy, the
    episodes equal the same episodes generated in process."""
    from types import SimpleNamespace

    from trl import ModelConfig, TrlParser

    from env.bargain.sources import get_split
    from training.rl import run as grpo
    from training.engine.backends import TRLVLLMBackend
    from training.common.cli import parse
    from training.engine.rollout import LLMAgent
    from training.games.bargain.rollout import play_episodes

    model, tok = tiny
    (script, cfg, _), _ = parse(TrlParser((grpo.GRPOScriptArguments, grpo.HaggleGRPOConfig, ModelConfig)),
                                ["--use_vllm", "--vllm_mode", "server", "--vllm_server_base_url", "http://gen:8000",
                                 "--temperature", "0", "--output_dir", "/tmp/x"])
    assert cfg.use_vllm and cfg.vllm_mode == "server" and cfg.vllm_server_base_url == "http://gen:8000"
    server = ServerAnswers(model, tok)
    rank = 1  # not the main process: it has no TRL client and builds its own
    trainer = SimpleNamespace(args=cfg, vllm_generation=SimpleNamespace(vllm_client=None), processing_class=tok,
                              model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m, process_index=rank))
    monkeypatch.setattr(TRLVLLMBackend, "client_factory", server)  # the stand-in for the server's client
    agent = grpo.EpisodeRollouts(script, cfg, None, [])._policy(trainer)
    assert isinstance(agent.backend, TRLVLLMBackend) and server.urls == [("http://gen:8000", cfg.vllm_server_timeout)]
    eps = [(sc, 7) for sc in get_split("builtin", "test")[:3]]
    served = play_episodes(eps, agent, "neutral", max_turns=3)
    local = play_episodes(eps, LLMAgent(TransformersBackend(model, tok, SamplingConfig(
        temperature=0, max_new_tokens=script.max_new_tokens))), "neutral", max_turns=3)
    assert [r.completion_ids for r in served] == [r.completion_ids for r in local]
    assert [r.reward for r in served] == [r.reward for r in local]
    assert server.requests and all(r["n"] == 1 and r["logprobs"] == 0 and tok.eos_token_id in r["stop_token_ids"]
                                   and 0 < r["max_tokens"] <= script.max_new_tokens for r in server.requests)
    assert [r["seed"] for r in server.requests] == [cfg.seed + grpo.PROCESS_SEED_STRIDE * rank + k
                                                   for k in range(len(server.requests))]
    assert all(isinstance(p, list) and all(isinstance(t, int) for t in p) for r in server.requests
               for p in r["prompts"])
    # colocated vLLM generates per process and per turn: tensor parallel or sleep mode is refused clearly
    cfg.vllm_mode, cfg.vllm_tensor_parallel_size = "colocate", 2
    with pytest.raises(ValueError, match="tensor_parallel_size 1"):
        TRLVLLMBackend(trainer, SamplingConfig())
