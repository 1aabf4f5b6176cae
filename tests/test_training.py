"""Smoke-sized training pipeline: SFT on expert games, then GRPO on whole episodes."""

from __future__ import annotations

import json

from training import grpo, sft

PROVENANCE_KEYS = {"command", "config", "seeds", "commit", "date", "machine", "wall_time_s"}
RL_KEYS = {"step", "reward_mean", "reward_std", "reward_min", "reward_max", "deal_rate", "first_offer_ratio",
           "turns_mean", "format_error_rate", "frac_reward_zero_std"}


def test_sft_then_grpo_smoke(tiny_dir, tmp_path):
    out = tmp_path / "sft"
    _, final = sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out),
                         "--curve", str(tmp_path / "sft.json")])
    curve = json.loads((tmp_path / "sft.json").read_text())
    assert PROVENANCE_KEYS <= set(curve["provenance"])
    assert [p["step"] for p in curve["points"]] == [1, 2]
    assert all({"loss", "learning_rate", "grad_norm", "mean_token_accuracy"} <= set(p) for p in curve["points"])
    assert curve["provenance"]["config"]["resumed"] is False
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()

    # interrupted training resumes from its last checkpoint
    sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out), "--max_steps", "3",
              "--curve", str(tmp_path / "sft2.json")])
    again = json.loads((tmp_path / "sft2.json").read_text())
    assert again["provenance"]["config"]["resumed"] is True
    assert [p["step"] for p in again["points"]][-1] == 3

    _, gfinal = grpo.main(["--smoke", "--model_name_or_path", str(final), "--output_dir", str(tmp_path / "grpo"),
                           "--curve", str(tmp_path / "grpo.json")])
    curve = json.loads((tmp_path / "grpo.json").read_text())
    assert PROVENANCE_KEYS <= set(curve["provenance"])
    assert curve["points"] and all(RL_KEYS <= set(p) for p in curve["points"])
    for p in curve["points"]:
        assert p["episodes"] == 8 and -1 <= p["reward_min"] <= p["reward_mean"] <= p["reward_max"] <= 1
    assert (gfinal / "config.json").exists()


def test_sdpo_hindsight_never_shows_the_cost():
    from env.evaluation import episode_seed
    from env.scenarios import get_split
    from training.rollout import play_episodes
    from training.sdpo import hindsight

    scenarios = get_split("builtin", "train")[:8]
    eps = [(s, episode_seed(i, 0, 1)) for i, s in enumerate(scenarios)]
    for buyer in ("expert", "lowballer", "random_valid"):
        records = play_episodes(eps, buyer, "neutral")
        for rec, (sc, _) in zip(records, eps):
            note = hindsight(rec, records, sc.budget)
            assert "cost" not in note.lower()
            for form in (f"${sc.cost:,.2f}", f"{sc.cost:.2f}"):
                if form not in str(rec.transcript["turns"]):  # unless the seller said that price aloud
                    assert form not in note
            assert "Hindsight feedback" in note and ("deal" in note or "no deal" in note or "reward" in note)
        better = [hindsight(r, records, 1.0) for r in records if r.reward < max(x.reward for x in records)]
        assert any("A better game" in n for n in better)
