"""Smoke-sized training pipeline: SFT on expert games, then GRPO on whole episodes."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

from training import sft
from training.games.bargain.config import BargainEvalArgs

ROOT = Path(__file__).resolve().parent.parent

PROVENANCE_KEYS = {"command", "config", "seeds", "commit", "date", "machine", "wall_time_s"}
RL_KEYS = {"step", "reward_mean", "reward_std", "reward_min", "reward_max", "deal_rate", "first_offer_ratio",
           "turns_mean", "format_error_rate", "frac_reward_zero_std"}


@pytest.mark.slow
def test_sft_resumes_from_its_last_checkpoint(tiny_dir, tmp_path):
    out = tmp_path / "sft"
    _, final = sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out),
                         "--curve", str(tmp_path / "sft.json")])
    first = json.loads((tmp_path / "sft.json").read_text())
    assert first["provenance"]["config"]["resumed"] is False and [p["step"] for p in first["points"]] == [1, 2]
    assert (final / "config.json").exists() and (final / "tokenizer.json").exists()
    sft.main(["--smoke", "--model", str(tiny_dir), "--output_dir", str(out), "--max_steps", "3",
              "--curve", str(tmp_path / "sft2.json")])
    again = json.loads((tmp_path / "sft2.json").read_text())
    assert again["provenance"]["config"]["resumed"] is True
    assert [p["step"] for p in again["points"]][-1] == 3


@pytest.mark.slow
def test_smoke_pipeline_writes_every_artifact(tmp_path):
    """tiny model -> SFT -> GRPO -> SDPO -> evaluation, at smoke size, through the one command."""
    proc = subprocess.run([sys.executable, "training/pipeline.py", "--smoke", "--workdir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    art = tmp_path / "artifacts"
    pipe = json.loads((art / "pipeline.json").read_text())
    assert [s["stage"] for s in pipe["stages"]] == ["tiny", "sft", "sft_option_b", "grpo", "sdpo", "evaluate",
                                                    "before_after", "generalisation"]
    ba = json.loads((art / "before_after.json").read_text())
    assert ba["buyers"] == ["base", "sft", "grpo", "sdpo"]
    assert [g["interest"] for g in ba["games"]].count("conflicting") == 1
    sft_curve = json.loads((art / "sft_training_curve.json").read_text())
    assert PROVENANCE_KEYS <= set(sft_curve["provenance"])
    assert all({"step", "loss", "learning_rate", "grad_norm", "mean_token_accuracy"} <= set(p)
               for p in sft_curve["points"])
    for name, curve_name in (("grpo", "grpo"), ("sdpo", "sdpo")):
        curve = json.loads((art / f"{curve_name}_training_curve.json").read_text())
        assert PROVENANCE_KEYS <= set(curve["provenance"]) and curve["points"]
        for p in curve["points"]:
            assert RL_KEYS <= set(p) and -1 <= p["reward_min"] <= p["reward_mean"] <= p["reward_max"] <= 1
        assert curve["provenance"]["command"].startswith(f"python training/{name}.py")
        if name == "sdpo":
            assert all("sdpo/lambda" in p for p in curve["points"])
    ev = json.loads((art / "eval_results.json").read_text())
    assert PROVENANCE_KEYS <= set(ev["provenance"])
    buyers = {r["buyer"] for r in ev["rows"]}
    assert {"base", "sft", "grpo", "sdpo", "expert", "sft_option_b"} <= buyers
    modes = {r["buyer"]: r["reasoning_mode"] for r in ev["rows"]}
    assert modes["sft_option_b"] == "option_b" and modes["grpo"] == modes["sft"] == "option_a"
    b_curve = json.loads((art / "sft_option_b_training_curve.json").read_text())
    assert b_curve["provenance"]["config"]["script"]["reasoning_mode"] == "option_b" and b_curve["points"]
    assert {r["buyer"] for r in ev["rows"] if r["seller"] == "mix"} == buyers
    assert all(r["split"] == "test" for r in ev["rows"])
    lines = (art / "transcripts" / "eval_results.jsonl").read_text().splitlines()
    pairs = {}
    for line in lines:
        t = json.loads(line)
        pairs.setdefault((t["seller"], t["scenario"]["id"], t["seed"]), set()).add(t["buyer"])
    assert any({"base", "grpo"} <= b for b in pairs.values()), "before/after: same scenario and seed"


def test_sdpo_hindsight_never_shows_the_cost():
    from env.bargain.evaluation import episode_seed
    from env.bargain.sources import get_split
    from training.games.bargain.rollout import play_episodes
    from training.rl.hindsight import hindsight

    scenarios = get_split("builtin", "train")[:8]
    eps = [(s, episode_seed(i, 0, 1)) for i, s in enumerate(scenarios)]
    for buyer in ("expert", "lowballer", "random_valid"):
        records = play_episodes(eps, buyer, "neutral")
        for rec, (sc, _) in zip(records, eps):
            note = hindsight(rec, records)
            assert "cost" not in note.lower()
            for form in (f"${sc.cost:,.2f}", f"{sc.cost:.2f}"):
                if form not in str(rec.transcript["turns"]):  # unless the seller said that price aloud
                    assert form not in note
            assert "Hindsight feedback" in note and ("deal" in note or "no deal" in note or "reward" in note)
        if buyer == "expert":  # siblings that did better with a positive reward become demonstrations
            best = max(x.reward for x in records)
            assert best > 0 and all("A better game" in hindsight(r, records) for r in records if r.reward < best)


def test_shipped_training_artifacts_follow_the_contract():
    art = ROOT / "artifacts"
    sft_curve = json.loads((art / "sft_training_curve.json").read_text())
    assert PROVENANCE_KEYS <= set(sft_curve["provenance"]) and len(sft_curve["points"]) > 10
    assert sft_curve["points"][-1]["loss"] < sft_curve["points"][0]["loss"]
    for name in ("grpo", "sdpo"):
        curve = json.loads((art / f"{name}_training_curve.json").read_text())
        assert PROVENANCE_KEYS <= set(curve["provenance"])
        assert all(RL_KEYS <= set(p) for p in curve["points"])
    ev = json.loads((art / "eval_results.json").read_text())
    assert PROVENANCE_KEYS <= set(ev["provenance"])
    mix = {r["buyer"]: r for r in ev["rows"] if r["seller"] == "mix"}
    assert {"base", "sft", "grpo", "sdpo", "expert"} <= set(mix)
    assert all(r["split"] == "test" for r in ev["rows"])
    assert ev["provenance"]["config"]["seed_base"] >= 1_000_000, "evaluation seeds never used in training"
    assert mix["sft"]["reasoning_mode"] == "option_a"
    # the reasoning-format ablation (pipeline --ablation), where shipped: trained like the option_a one
    if "sft_option_b" in mix:
        assert mix["sft_option_b"]["reasoning_mode"] == "option_b"
        a_cfg, b_cfg = (json.loads((art / f).read_text())["provenance"]["config"]["script"]
                        for f in ("sft_training_curve.json", "sft_option_b_training_curve.json"))
        assert {**a_cfg, "reasoning_mode": "option_b", "curve": ""} == {**b_cfg, "curve": ""}, "same SFT budget"
    # every shipped artifact of the training pipeline comes from the same run's checkpoints
    for f in ("eval_results.json", "grpo_training_curve.json", "sdpo_training_curve.json"):
        assert "runs/sft/final" in json.loads((art / f).read_text())["provenance"]["command"]
    # the one command recorded every stage and its wall time
    pipe = json.loads((art / "pipeline.json").read_text())
    # the shipped artifacts come from one run of the pipeline: its stages in the plan's order
    ran = [s["stage"] for s in pipe["stages"]]
    order = ["tiny", "sft", "sft_option_b", "grpo", "sdpo", "evaluate", "before_after", "generalisation"]
    assert {"tiny", "sft", "grpo", "sdpo", "evaluate"} <= set(ran) and ran == sorted(ran, key=order.index), ran
    # this invocation's wall time covers the stages it ran; a stage an earlier run finished says so
    assert pipe["provenance"]["wall_time_s"] >= sum(s["wall_time_s"] for s in pipe["stages"] if not s.get("skipped_now"))
    assert all(s["wall_time_s"] > 0 and s["commit"] for s in pipe["stages"])


def test_presets_keep_a_seller_out_of_training_and_the_full_one_trains_on_10k_episodes(tmp_path):
    from env.bargain.players import SELLERS
    from training import pipeline
    from training.rl import run as rl_run
    for preset in ("default", "full"):
        plan = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", preset))
        for name in ("sft", "grpo", "sdpo"):
            cmd = plan[name]
            sellers = cmd[cmd.index("--sellers") + 1].split(",")
            assert pipeline.HELD_OUT_SELLER not in sellers and len(sellers) == len(SELLERS) - 1
        # every training stage plays the same products: the catalog and generated ones, never the test split
        assert {plan[name][plan[name].index("--scenarios") + 1] for name in ("sft", "grpo", "sdpo")} == \
            {pipeline.TRAIN_SCENARIOS}
        assert plan["generalisation"][plan["generalisation"].index("--train_source") + 1] == pipeline.TRAIN_SCENARIOS
        # both RL stages hold the policy near its SFT start with the same KL weight
        betas = {float(plan[name][plan[name].index("--beta") + 1]) for name in ("grpo", "sdpo")}
        assert len(betas) == 1 and betas.pop() > 0
        ev = plan["evaluate"]
        assert ev[ev.index("--temperatures") + 1] == "0,0.7"
        gen = plan["generalisation"]
        assert gen[gen.index("--held_out_seller") + 1] == pipeline.HELD_OUT_SELLER
        steps = int(plan["grpo"][plan["grpo"].index("--max_steps") + 1])
        cfg = rl_run.HaggleGRPOConfig(output_dir=str(tmp_path))
        episodes = steps * cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
        assert episodes >= (10_000 if preset == "full" else 1_000), (preset, episodes)
        assert "sft_option_b" not in plan  # the ablation is asked for
        ablation = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", preset, ablation=True))
        assert ablation["sft_option_b"][ablation["sft_option_b"].index("--reasoning_mode") + 1] == "option_b"
        assert "sft_option_b=" in ablation["evaluate"][ablation["evaluate"].index("--buyer_models") + 1]


def test_a_changed_stage_starts_fresh_and_an_interrupted_one_resumes(tmp_path):
    from training.pipeline import fresh_or_resume
    out = tmp_path / "grpo"
    old = ["training/grpo.py", "--max_steps", "160", "--output_dir", str(out)]
    new = ["training/grpo.py", "--max_steps", "160", "--beta", "0.04", "--output_dir", str(out)]
    fresh_or_resume(old, " ".join(old))
    (out / "checkpoint-160").mkdir()
    # the same command again (an interrupted run): its checkpoints stay where the script resumes from them
    assert "resuming" in fresh_or_resume(old, " ".join(old)) and (out / "checkpoint-160").exists()
    # a changed command: the old run is moved aside whole, and the new one finds no checkpoint to resume
    assert "moved" in fresh_or_resume(new, " ".join(new))
    assert not any(out.glob("checkpoint-*")) and (tmp_path / "grpo.superseded-1" / "checkpoint-160").exists()
    # a folder from before the pipeline marked its folders (no record of its command) is not trusted either
    legacy = tmp_path / "sdpo"
    (legacy / "checkpoint-40").mkdir(parents=True)
    cmd = ["training/sdpo.py", "--output_dir", str(legacy)]
    assert "moved" in fresh_or_resume(cmd, " ".join(cmd)) and not any(legacy.glob("checkpoint-*"))
    assert (tmp_path / "sdpo.superseded-1" / "checkpoint-40").exists()
    # the same command on other code (a changed recipe inside a script, its defaults): fresh too
    fresh_or_resume(new, " ".join(new), code="aaa")
    (out / "checkpoint-20").mkdir()
    assert "resuming" in fresh_or_resume(new, " ".join(new), code="aaa")
    assert "moved" in fresh_or_resume(new, " ".join(new), code="bbb") and not any(out.glob("checkpoint-*"))


def test_a_skipped_stage_leaves_its_model_out_of_every_evaluation(tmp_path):
    from training import pipeline
    plan = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", "full", skip=frozenset({"sdpo"})))
    assert "sdpo" not in plan and "grpo" in plan
    for stage, flag in (("evaluate", "--buyer_models"), ("before_after", "--models")):
        models = plan[stage][plan[stage].index(flag) + 1]
        assert "grpo=" in models and "sdpo" not in models, (stage, models)
    full = dict(pipeline.stages(tmp_path, tmp_path / "art", False, "builtin", "full"))
    assert "sdpo=" in full["evaluate"][full["evaluate"].index("--buyer_models") + 1]
    bad = subprocess.run([sys.executable, "training/pipeline.py", "--skip", "sft"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "--skip takes stages from" in bad.stderr


def test_code_version_follows_the_code_not_the_docs(tmp_path, monkeypatch):
    """The fingerprint a finished stage is matched by: a change under training/ changes it, a README
    change does not (so editing docs never retrains, and editing code always does)."""
    from training.common import provenance
    repo = tmp_path / "repo"
    (repo / "training").mkdir(parents=True)
    (repo / "env").mkdir()
    for f, text in {"training/a.py": "x = 1\n", "env/b.py": "", "README.md": "hi\n", "pyproject.toml": "",
                    "requirements.txt": ""}.items():
        (repo / f).write_text(text)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "a"], cwd=repo, check=True)
    monkeypatch.setattr(provenance, "REPO_ROOT", repo)
    first = provenance.code_version()
    (repo / "README.md").write_text("docs changed\n")
    assert provenance.code_version() == first != "unknown"
    (repo / "training" / "a.py").write_text("x = 2\n")
    changed = provenance.code_version()
    assert changed != first
    subprocess.run([*git, "commit", "-qam", "b"], cwd=repo, check=True)
    assert provenance.code_version() not in (first, changed)  # committed: the tree hash moves instead


def test_a_rerun_skips_the_stages_an_earlier_run_finished(tmp_path):
    art = tmp_path / "art"
    cmd = [sys.executable, "training/pipeline.py", "--only", "tiny", "--workdir", str(tmp_path), "--artifacts", str(art)]
    first = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    stage = json.loads((art / "pipeline.json").read_text())["stages"][0]
    assert stage["stage"] == "tiny" and stage["hardware"] and stage["commit"] and "skipped_now" not in stage
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "finished by an earlier run, skipped" in again.stdout
    assert json.loads((art / "pipeline.json").read_text())["stages"][0]["skipped_now"] is True
    redo = subprocess.run(cmd + ["--restart"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "skipped" not in redo.stdout
    # the record says the stage ran other code (the code changed since): it runs again, and says why
    state = tmp_path / "pipeline_state.json"
    recorded = json.loads(state.read_text())
    recorded["tiny"]["code"] = "other"
    state.write_text(json.dumps(recorded))
    changed = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "skipped" not in changed.stdout and "on other code: running it again" in changed.stdout


def test_shipped_checkpoint_plays_offline():
    from env.bargain.play import play_episode
    from env.bargain.players import make_player
    from env.bargain.sources import get_split
    from training.engine.backends import SamplingConfig, TransformersBackend
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent
    from training.games.bargain.rollout import LLMPlayer

    path = ROOT / "artifacts" / "checkpoints" / "grpo-tiny"
    assert sum(f.stat().st_size for f in path.iterdir()) < 25 * 2**20
    model, tok = load_model(str(path), device="cpu")
    agent = LLMAgent(TransformersBackend(model, tok, SamplingConfig(temperature=0.0)), "option_a")
    env = play_episode(get_split("builtin", "test")[0], LLMPlayer(agent, "buyer"), make_player("seller", "neutral"), 1)
    assert env.metrics().end_reason != "running" and env.log[0]["role"] == "buyer"



def test_sdpo_dense_advantage_is_centred_so_a_biased_teacher_does_not_push_every_token_down():
    import torch

    from training.rl.hindsight import mixed_advantages
    torch.manual_seed(0)
    student = -torch.rand(4, 10)
    teacher = student - 0.8 + 0.3 * torch.randn(4, 10)  # a teacher that scores everything lower, plus signal
    mask = torch.ones(4, 10)
    mask[:, 7:] = 0  # environment tokens carry no advantage
    episode = torch.tensor([1.0, -1.0, 0.5, -0.5])
    raw, bias = mixed_advantages(episode, teacher, student, mask, lam=0.5, clamp=5.0, center="none")
    centred, bias2 = mixed_advantages(episode, teacher, student, mask, lam=0.5, clamp=5.0, center="batch")
    assert bias == bias2 < -0.5
    dense = (centred - 0.5 * episode.unsqueeze(1)) * mask
    assert abs(dense.sum().item() / mask.sum().item()) < 1e-5, "the dense term averages zero over buyer tokens"
    assert ((raw - 0.5 * episode.unsqueeze(1)) * mask).sum().item() / mask.sum().item() == pytest.approx(0.5 * bias)
    order = lambda a: torch.argsort(a[mask.bool()])  # noqa: E731
    assert torch.equal(order(raw - 0.5 * episode.unsqueeze(1)), order(dense)), "which tokens it prefers is kept"
    assert torch.all(centred[:, 7:] == 0.5 * episode.unsqueeze(1).expand(4, 3))


def test_sft_can_teach_a_model_the_sellers_side_and_it_then_sells_regulated(tiny_dir, tmp_path):
    from training import evaluate
    from training.engine.backends import TransformersBackend
    from training.games.bargain import BargainGame
    from training.engine.models import load_model
    from training.engine.rollout import LLMAgent

    script = sft.SFTScriptArguments(model=str(tiny_dir), role="seller", sellers="neutral,insulting", games=8)
    game = BargainGame(script)
    model, tok = load_model(str(tiny_dir), device="cpu")
    data, rewards = game.expert_games([LLMAgent(TransformersBackend(model, tok), "option_a")], 8, role="seller")
    assert len(data) == 8 and all(0 <= r <= 1 for r in rewards), "the seller's reward: never below cost"
    for ids, mask in zip(data["input_ids"], data["completion_mask"]):
        trained = tok.decode([t for t, m in zip(ids, mask) if m])
        assert "floor" in trained and ("[SELL]" in trained or "[DEAL]" in trained)  # the seller's own moves
        assert "[BUY]" not in trained, "the buyer's moves carry no loss"
    _, final = sft.main(["--smoke", "--model", str(tiny_dir), "--role", "seller", "--output_dir", str(tmp_path / "s"),
                         "--curve", ""])
    art = evaluate.run(BargainEvalArgs(scenarios="builtin", buyers="expert", seller_model=str(final),
                                           seller_name="llm_seller", limit=2, seeds=1, out="", transcripts="",
                                           progress=False, temperatures="0"))
    rows = [r for r in art["rows"] if r["seller"] == "llm_seller"]
    assert rows and not any(r["buyer"] == "oracle" for r in art["rows"]), "no ceiling without a scripted floor"
    assert rows[0]["episodes"] == 2
    with pytest.raises(ValueError, match="--role"):
        sft.SFTScriptArguments(role="auctioneer")


def test_generalisation_studies_say_what_they_run_and_the_model_seller_plays_the_first_products():
    from env.bargain.sources import amazon_path
    from training.generalisation import GeneralisationConfig, studies
    plan = studies(GeneralisationConfig(buyer_models="grpo=x", held_out_seller="boulware", limit=30))
    assert plan["b_held_out_seller"]["options"]["sellers"] == "boulware"
    assert plan["c_adversarial"]["options"]["sellers"] == "begging,insulting,unyielding"
    assert plan["d_llm_seller"]["options"] is None and "--seller_model" in plan["d_llm_seller"]["why_not"]
    with_seller = studies(GeneralisationConfig(buyer_models="grpo=x", seller_model="m", limit=30, seller_model_limit=4))
    d = with_seller["d_llm_seller"]
    assert d["options"]["seller_model"] == "m" and d["options"]["limit"] == 4 and "first 4 test products" in d["question"]
    assert with_seller["b_held_out_seller"]["options"]["limit"] == 30, "the scripted studies keep --limit"
    as_limit = studies(GeneralisationConfig(buyer_models="grpo=x", seller_model="m", limit=30, seller_model_limit=0))
    assert as_limit["d_llm_seller"]["options"]["limit"] == 30
    # trained on the catalog plus generated products: (a) is the source left out, (b)-(d) the catalog's test split
    union = studies(GeneralisationConfig(buyer_models="grpo=x", train_source="builtin+synthetic", seller_model="m"))
    assert {union[k]["options"]["scenarios"] for k in ("b_held_out_seller", "c_adversarial", "d_llm_seller")} == \
        {"builtin"}
    if amazon_path().is_dir():
        assert union["a_other_source"]["options"]["scenarios"] == "amazon"
    both = studies(GeneralisationConfig(buyer_models="grpo=x", train_source="amazon+builtin"))
    assert both["a_other_source"]["options"] is None and "every evaluation source" in both["a_other_source"]["why_not"]
    with pytest.raises(ValueError, match="--held_out_seller"):
        GeneralisationConfig(buyer_models="grpo=x", held_out_seller="nobody")
    with pytest.raises(ValueError, match="--seller_model_limit"):
        GeneralisationConfig(buyer_models="grpo=x", seller_model_limit=-1)


@pytest.mark.parametrize("mode", ["option_a", "option_b"])
def test_every_expert_reply_sft_teaches_fits_the_reply_budget_of_training_and_evaluation(tiny, mode):
    """A reply longer than the budget is cut into a format error: a budget below the expert's replies
    punishes the policy for writing what SFT taught it (GRPO's old 64 cut 19% of them)."""
    from training.engine.backends import REPLY_TOKENS, SamplingConfig, TransformersBackend
    from training.games.bargain import BargainGame
    from training.rl.run import GRPOScriptArguments
    from training.engine.rollout import LLMAgent

    assert GRPOScriptArguments.max_new_tokens == SamplingConfig.max_new_tokens == REPLY_TOKENS
    model, tok = tiny
    longest = 0
    for source in ("builtin", "synthetic"):
        game = BargainGame(sft.SFTScriptArguments(scenarios=source, games=70))
        data, _ = game.expert_games([LLMAgent(TransformersBackend(model, tok), mode)], 70)
        for mask in data["completion_mask"]:  # each run of 1s is one buyer reply
            run = 0
            for m in [*mask, 0]:
                if m:
                    run += 1
                else:
                    longest, run = max(longest, run), 0
    think = SamplingConfig.think_tokens if mode == "option_b" else 0
    assert 60 < longest <= REPLY_TOKENS + think, longest
