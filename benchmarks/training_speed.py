"""Training speed on this machine: SFT tokens/s and GRPO-rollout episodes/s, for the tiny model
and SmolLM2-135M-Instruct, in float32 and under bfloat16 autocast, in one run.

* SFT: TRL's ``SFTTrainer`` on the bilateral expert games (the adapter's own, tokenized for each
  model), batch ``--batch`` x up to ``--max-length`` tokens, ``--steps`` timed steps after one
  warm-up step. The tiny model is fully fine-tuned; SmolLM2 trains a LoRA (PEFT, r=16, every
  linear layer), as ``training/sft.py`` does for pretrained models. ``bf16`` is TRL's own switch
  (``bf16=True``: autocast to bfloat16 on this CPU, float32 master weights).
* GRPO rollouts: one step's generation, ``--episodes`` whole episodes with the model as the buyer
  against the neutral seller through the batched rollout engine (sampling at T=0.7), with the
  weights in float32 or in bfloat16 (generation keeps a preallocated KV cache of the weights'
  dtype, so autocast does not apply there).
* Peak: a 2048 x 2048 matmul in each precision. ``fraction_of_peak`` divides the model FLOPs the
  SFT step did (6 N per token with all weights trained, 4 N with LoRA, which computes no weight
  gradients for frozen layers; N = parameters) by that peak.

    python benchmarks/training_speed.py          # -> artifacts/benchmarks/training.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from types import SimpleNamespace

PRECISIONS = ("float32", "bfloat16")


def peak_gflops(dtype: str, n: int = 2048, repeats: int = 10) -> float:
    import torch  # noqa: PLC0415

    a = torch.randn(n, n, dtype=getattr(torch, dtype))
    b = torch.randn(n, n, dtype=getattr(torch, dtype))
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e9


def expert_games(model, tok, games: int, max_length: int):
    """The bilateral expert games (the SFT adapter's, seller mix, option_a) tokenized for ``tok``."""
    from env.bargain.players import SELLERS  # noqa: PLC0415
    from training.engine.backends import TransformersBackend  # noqa: PLC0415
    from training.games.bargain import BargainGame  # noqa: PLC0415
    from training.engine.rollout import LLMAgent  # noqa: PLC0415

    game = BargainGame(SimpleNamespace(scenarios="builtin", budget_factor=0.8, seller_names=list(SELLERS),
                                       max_turns=6))
    backend = TransformersBackend(model, tok)
    dataset, _ = game.expert_games([LLMAgent(backend, "option_a")], games)
    return dataset.map(lambda r: {k: v[:max_length] for k, v in r.items()})


def sft_speed(name: str, precision: str, batch: int, max_length: int, steps: int) -> dict:
    from transformers import TrainerCallback  # noqa: PLC0415
    from trl import SFTConfig, SFTTrainer  # noqa: PLC0415

    from training.engine.models import is_pretrained, load_model, lora_config  # noqa: PLC0415

    model, tok = load_model(name, device="cpu", dtype="float32")
    data = expert_games(model, tok, batch * (steps + 1), max_length)
    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append(time.perf_counter())

    peft = lora_config() if is_pretrained(name) else None
    cfg = SFTConfig(output_dir="/tmp/haggle-training-speed", per_device_train_batch_size=batch, max_steps=steps + 1,
                    learning_rate=1e-4, bf16=precision == "bfloat16", use_cpu=True, gradient_checkpointing=False,
                    completion_only_loss=True, max_length=max_length, report_to="none", save_strategy="no",
                    logging_steps=1000, dataloader_drop_last=True, seed=0)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=data, processing_class=tok, peft_config=peft,
                         callbacks=[Clock()])
    trainer.train()
    step_s = statistics.fmean(b - a for a, b in zip(marks, marks[1:]))  # the warm-up step is not timed
    tokens = statistics.fmean(len(x) for x in data["input_ids"]) * batch
    params = sum(p.numel() for p in model.parameters())
    flops_per_token = (4 if peft else 6) * params
    return {"model": name, "precision": precision, "lora": bool(peft), "parameters": params,
            "trainable_parameters": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad),
            "batch": batch, "tokens_per_step": tokens, "step_s": step_s, "tokens_per_s": tokens / step_s,
            "model_gflops_per_s": flops_per_token * tokens / step_s / 1e9}


def rollout_speed(name: str, precision: str, episodes: int, max_new_tokens: int) -> dict:
    from env.bargain.evaluation import episode_seed  # noqa: PLC0415
    from env.bargain.sources import get_split  # noqa: PLC0415
    from training.engine.backends import SamplingConfig, TransformersBackend  # noqa: PLC0415
    from training.engine.models import load_model  # noqa: PLC0415
    from training.engine.rollout import LLMAgent  # noqa: PLC0415
    from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

    model, tok = load_model(name, device="cpu", dtype=precision)
    agent = LLMAgent(TransformersBackend(model, tok, SamplingConfig(temperature=0.7, max_new_tokens=max_new_tokens,
                                                                    seed=0)), "option_a")
    train = get_split("builtin", "train")
    eps = [(train[i % len(train)], episode_seed(i, 0, 1, base=0)) for i in range(episodes)]
    play_episodes(eps[:2], agent, "neutral")  # warm-up
    start = time.perf_counter()
    records = play_episodes(eps, agent, "neutral")
    wall = time.perf_counter() - start
    return {"model": name, "precision": precision, "episodes": episodes, "wall_s": wall,
            "episodes_per_s": episodes / wall, "generated_tokens": sum(sum(r.env_mask) for r in records)}


def main(argv: list[str] | None = None) -> dict:
    from training.common.provenance import benchmark_artifact, command_line  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="tiny,smollm2-135m")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--out", default="artifacts/benchmarks/training.json")
    a = ap.parse_args(argv)
    start = time.perf_counter()
    peak = {p: peak_gflops(p) for p in PRECISIONS}
    results: dict = {"peak_matmul_gflops": peak, "sft": [], "rollout": [], "bf16_over_fp32": {}}
    for name in a.models.split(","):
        for precision in PRECISIONS:
            row = sft_speed(name, precision, a.batch, a.max_length, a.steps)
            row["fraction_of_peak"] = row["model_gflops_per_s"] / peak[precision]
            results["sft"].append(row)
            results["rollout"].append(rollout_speed(name, precision, a.episodes, a.max_new_tokens))
            print(f"{name} {precision}: SFT {row['tokens_per_s']:.0f} tokens/s ({row['fraction_of_peak']:.1%} of "
                  f"peak), rollout {results['rollout'][-1]['episodes_per_s']:.2f} episodes/s", flush=True)
        sft = {r["precision"]: r["tokens_per_s"] for r in results["sft"] if r["model"] == name}
        ro = {r["precision"]: r["episodes_per_s"] for r in results["rollout"] if r["model"] == name}
        results["bf16_over_fp32"][name] = {"sft_tokens_per_s": sft["bfloat16"] / sft["float32"],
                                           "rollout_episodes_per_s": ro["bfloat16"] / ro["float32"]}
    return benchmark_artifact(a.out, vars(a), {"rollout": "train products 0.., seeds 0.. (greedy off, T=0.7, "
                                               "sampling seed 0)"}, start, results,
                              command_line(__file__, [__file__, *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    main()
