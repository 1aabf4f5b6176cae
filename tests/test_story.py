"""The Space's first screen and its readable figures: the sentence and chart come from the artifacts, commands
are shown relative to the repository, the before/after game is chosen by its stated rule, curves are smoothed
beside their raw points."""

from __future__ import annotations

import re

import pytest

from hypothesis import given
from hypothesis import strategies as st

from space import figures as F
from space import story
from space.card import card_facts
from space.model import model_path

ABSOLUTE = re.compile(r"(?:^|[\s\"'`(=\[])/(?:home|root|work|tmp|usr|opt|var|mnt|srv|private|Users)/")


def test_the_first_sentence_names_the_seat_model_and_its_numbers_from_the_artifacts():
    facts = card_facts(model_path())
    text = story.sentence(model_path())
    rows = {r["buyer"]: r for r in F.eval_rows(facts["eval_file"], "mix")}
    row = rows[facts["eval_buyer"]]
    oracle = next(r for r in rows.values() if r.get("upper_bound"))
    for value in (row["reward_mean"], rows["expert"]["reward_mean"], oracle["reward_mean"]):
        assert f"{value:+.3f}" in text
    assert facts["name"] in text and "Did it learn?" in text and not ABSOLUTE.search(text)
    machine = facts["training"][-1]["machine"]
    assert re.search(r"(\d+) CPUs", machine).group(1) + "-core CPU" in text or "GPU" in text


def test_the_chart_highlights_the_seat_model_with_cis_and_the_expert_and_ceiling_lines():
    facts = card_facts(model_path())
    for which in ("builtin", "amazon"):
        fig = story.chart(model_path(), which)
        bar = fig.data[0]
        names = list(bar.y)
        seat = F.display_name(facts["eval_buyer"])  # "tiny GRPO", "SmolLM2 GRPO": the family named on every bar
        assert seat in names and "expert" not in names  # the expert is a line, not a bar
        assert all(n.startswith(("tiny ", "SmolLM2 ")) or "best baseline" in n for n in names), names
        red = [n for n, c in zip(names, bar.marker.color) if c == story.HIGHLIGHT]
        assert red == [seat]
        assert all(lo >= 0 and hi >= 0 for lo, hi in zip(bar.error_x.arrayminus, bar.error_x.array))
        texts = [a.text for a in fig.layout.annotations]
        assert any(t.startswith("expert") for t in texts) and any(t.startswith("ceiling") for t in texts), texts
        assert list(bar.x) == sorted(bar.x)


@given(st.lists(st.sampled_from(["a", "b_c", "x.y", "9", "run-1", "my dir"]), max_size=4),
       st.sampled_from(F.REPO_DIRS), st.lists(st.sampled_from(["sft", "final", "e.json", "c-1"]), max_size=3))
def test_absolute_paths_in_the_repository_are_shown_relative_to_it(prefix, top, rest):
    checkout = "/" + "/".join(p.replace(" ", "_") for p in prefix) if prefix else ""
    tail = "/".join([top, *rest])
    text = f"python training/grpo.py --output_dir {checkout}/{tail} --model_name_or_path={checkout}/{tail}"
    shown = F.relative(text)
    assert shown == f"python training/grpo.py --output_dir {tail} --model_name_or_path={tail}"
    assert F.relative(shown) == shown


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=80))
def test_relative_never_leaves_an_absolute_path_and_keeps_urls(text):
    shown = F.relative(f"{text} /root/.pyenv/bin/python3.11 -m x /tmp/base http://127.0.0.1:7860/ 1/2")
    assert "/root/" not in shown and "/tmp/base" not in shown and "python -m x" in shown
    assert "http://127.0.0.1:7860/" in shown and "1/2" in shown


def test_provenance_as_displayed_is_relative_and_the_files_keep_the_full_record():
    for row in F.list_artifacts():
        assert not ABSOLUTE.search(row["command"]), row
    for name in ("eval_results.json", "grpo_training_curve.json", "pipeline.json"):
        line = F.provenance_line(F.read_artifact(name), name)
        assert not ABSOLUTE.search(line), line
    # the files themselves are untouched: what the Space shows of a record is derived from it
    data = F.read_artifact("pipeline.json")
    assert F.pipeline_table() == [[s["stage"], f"{s['wall_time_s']:.0f}", F.relative(s["command"])]
                                  for s in data["stages"]]


def test_the_before_after_default_game_follows_the_stated_rule():
    data = F.read_artifact(F.BEFORE_AFTER)
    games, buyers = data["games"], data["buyers"]
    seat = card_facts(model_path())["eval_buyer"]
    after = seat if seat in buyers[1:] else buyers[-1]
    best, pick = -1.0, 0
    for k, g in enumerate(games):  # recomputed here: the largest |seat model - untrained| among mutual games
        if g["interest"] != "mutual":
            continue
        change = abs(g["rewards"][after] - g["rewards"][buyers[0]])
        if change > best:
            best, pick = change, k
    assert F.before_after_default(games, buyers, seat) == pick
    assert games[pick]["interest"] == "mutual"
    assert "largest" in F.BEFORE_AFTER_RULE and "model seat" in F.BEFORE_AFTER_RULE
    product = F.before_after_product(games[pick])
    assert games[pick]["title"] in product and f"${games[pick]['list_price']:,.2f}" in product
    # a hand-made file: the seat's buyer decides, not the last column
    made = [{"interest": "mutual", "rewards": {"base": 0.0, "grpo": 0.5, "sdpo": 0.0}},
            {"interest": "conflicting", "rewards": {"base": -1.0, "grpo": 0.0, "sdpo": 0.0}},
            {"interest": "mutual", "rewards": {"base": 0.0, "grpo": 0.1, "sdpo": 0.9}}]
    assert F.before_after_default(made, ["base", "grpo", "sdpo"], "grpo") == 0
    assert F.before_after_default(made, ["base", "grpo", "sdpo"], "smollm2_grpo") == 2
    # a listing whose title the catalog here does not hold at that index: the artifact's own title, no other product
    other = {**games[pick], "title": "A Product That Is Not In The Catalog"}
    shown = F.before_after_product(other)
    assert "A Product That Is Not In The Catalog" in shown and games[pick]["title"] not in shown


def test_the_moving_average_by_hand():
    assert F.moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]
    assert F.moving_average([0.0, None, 0.6, None], 3) == [0.0, 0.0, 0.3, 0.6]
    assert F.moving_average([None, None], 5) == [None, None]
    assert F.moving_average([], 3) == []


@given(st.lists(st.one_of(st.none(), st.floats(-1, 1)), max_size=40), st.integers(1, 12))
def test_the_moving_average_is_the_trailing_mean_of_the_raw_points(values, window):
    avg = F.moving_average(values, window)
    assert len(avg) == len(values)
    for k, a in enumerate(avg):
        seen = [v for v in values[max(0, k - window + 1):k + 1] if v is not None]
        assert (a is None) == (not seen)
        if seen:
            assert abs(a - sum(seen) / len(seen)) < 1e-9 and min(seen) - 1e-9 <= a <= max(seen) + 1e-9


def test_the_reward_curve_shows_raw_points_their_average_the_references_and_where_rl_starts():
    fig = F.rl_rewards()
    names = [t.name for t in fig.data]
    for algo, name in F.RL_CURVES.items():
        if F._points(name):
            label = F.rl_label(algo)
            assert f"{label} per step (raw)" in names and any(n.startswith(f"{label} moving average") for n in names)
    texts = [a.text for a in fig.layout.annotations]
    assert any("expert" in t for t in texts) and any("ceiling" in t for t in texts)
    assert any("RL starts" in t for t in texts)


def _shipped(tmp_path, monkeypatch, cards: dict, rows: list[dict] | None):
    """Checkpoint folders with these cards (None: no card) and an eval_results.json with these mix rows."""
    import json

    from space import model as seat
    art = tmp_path / "artifacts"
    for name, card in cards.items():
        (art / "checkpoints" / name).mkdir(parents=True)
        if card is not None:
            (art / "checkpoints" / name / "card.json").write_text(json.dumps(card))
    if rows is not None:
        (art / "eval_results.json").write_text(json.dumps({"rows": [{"seller": "mix", **r} for r in rows]}))
    monkeypatch.setattr(F, "ARTIFACTS", art)
    monkeypatch.setattr(seat, "CHECKPOINTS", art / "checkpoints")
    monkeypatch.setattr(seat, "SHIPPED", art / "checkpoints" / "grpo-tiny")
    monkeypatch.delenv(seat.ENV_VAR, raising=False)
    return art / "checkpoints"


CARDS = {"grpo-tiny": {"eval_buyer": "grpo"}, "grpo-big": {"eval_buyer": "big_rl", "eval_file": "eval_big.json"},
         "sft-big-seller": {"eval_buyer": "expert", "eval_seller": "llm_seller"}, "no-card": None,
         "sft-big": {"eval_buyer": "big_sft"}, "ceiling": {"eval_buyer": "oracle"}}


def test_the_model_seat_holds_the_shipped_buyer_whose_row_is_best(tmp_path, monkeypatch):
    """The seat follows the numbers: the best mix row of eval_results.json among the shipped buyers' cards; a model
    seller's card, a row on a subset of the episodes and the oracle never compete; ties keep the tiny buyer."""
    from space import model as seat
    rows = [{"buyer": "grpo", "reward_mean": 0.20}, {"buyer": "big_rl", "reward_mean": 0.25},
            {"buyer": "expert", "reward_mean": 0.40}, {"buyer": "oracle", "reward_mean": 0.55, "upper_bound": True},
            {"buyer": "big_sft", "reward_mean": 0.30, "episodes_subset": "the first 12 of these 50 test products"}]
    ck = _shipped(tmp_path, monkeypatch, CARDS, rows)
    assert seat.headline_checkpoint() == ck / "grpo-big" and seat.model_path() == str(ck / "grpo-big")
    monkeypatch.setenv(seat.ENV_VAR, "/some/other/model")  # the variable still decides when set
    assert seat.model_path() == "/some/other/model"


def test_the_tiny_buyer_keeps_the_seat_without_a_better_row(tmp_path, monkeypatch):
    from space import model as seat
    ck = _shipped(tmp_path, monkeypatch, CARDS, [{"buyer": "grpo", "reward_mean": 0.2},
                                                 {"buyer": "big_rl", "reward_mean": 0.2}])
    assert seat.headline_checkpoint() == ck / "grpo-tiny"  # a tie
    ck = _shipped(tmp_path / "none", monkeypatch, CARDS, None)
    assert seat.headline_checkpoint() == ck / "grpo-tiny"  # no evaluation at all


def test_the_seat_weighs_the_other_sources_test_products_when_every_competitor_has_them(tmp_path, monkeypatch):
    """A buyer a little below on the builtin split and far above on the other source's test products (study (a) of
    eval_generalisation.json) takes the seat; another study's rows never count, and when one competitor has no
    study (a) row the builtin split alone decides."""
    import json

    from space import model as seat
    rows = [{"buyer": "grpo", "reward_mean": 0.225}, {"buyer": "big_rl", "reward_mean": 0.218},
            {"buyer": "expert", "reward_mean": 0.237}]

    def study(buyer, reward, name="a_other_source"):
        return {"buyer": buyer, "seller": "mix", "study": name, "reward_mean": reward}

    for where, studied, seated in [
            ("none", None, "grpo-tiny"),  # no generalisation file: builtin alone
            ("both", [study("grpo", -0.22), study("big_rl", 0.19)], "grpo-big"),
            ("other-study", [study("grpo", 0.9, "c_adversarial"), study("grpo", -0.22), study("big_rl", 0.19)],
             "grpo-big"),
            ("one-missing", [study("big_rl", 0.19), study("expert", 0.2)], "grpo-tiny"),
            ("still-lower", [study("grpo", 0.30), study("big_rl", 0.29)], "grpo-tiny")]:
        ck = _shipped(tmp_path / where, monkeypatch, CARDS, rows)
        if studied is not None:
            (ck.parent / "eval_generalisation.json").write_text(json.dumps({"rows": studied}))
        assert seat.headline_checkpoint() == ck / seated, where


def test_before_after_shows_the_seated_models_family(tmp_path, monkeypatch):
    """A seat whose card names its family's before/after games shows those; without the file, the tiny run's."""
    import json

    import app
    ck = _shipped(tmp_path, monkeypatch, {"grpo-big": {"eval_buyer": "big_rl", "before_after": "ba_big.json"}},
                  [{"buyer": "big_rl", "reward_mean": 0.3}])
    real = json.loads((app.F.ROOT / "artifacts" / F.BEFORE_AFTER).read_text())
    assert app.before_after_file() == F.BEFORE_AFTER  # ba_big.json is not there
    big = {**real, "buyers": ["big_base", "big_rl"],
           "games": [{**g, "games": {"big_base": g["games"][real["buyers"][0]], "big_rl": g["games"][real["buyers"][-1]]},
                      "rewards": {"big_base": g["rewards"][real["buyers"][0]], "big_rl": g["rewards"][real["buyers"][-1]]}}
                     for g in real["games"]]}
    (ck.parent / "ba_big.json").write_text(json.dumps(big))
    assert app.before_after_file() == "ba_big.json" and app.before_after_buyers() == ["big_base", "big_rl"]
    *chats, summary = app.ui_before_after(0)
    assert len(chats) == 2 and all(chats) and "ba_big.json" in summary and "big_rl" in summary


@pytest.mark.parametrize("name, shown", [("smollm2_grpo", "SmolLM2 GRPO"), ("smollm2_base", "SmolLM2 untrained"),
                                         ("grpo", "tiny GRPO"), ("base", "tiny untrained"), ("sdpo", "tiny SDPO"),
                                         ("smollm2_market_sft", "SmolLM2 SFT"), ("expert", "expert"),
                                         ("random_valid", "random_valid"), ("smollm2_custom", "SmolLM2 custom")])
def test_every_model_row_is_named_by_its_family(name, shown):
    assert F.display_name(name) == shown


def _row(mean, lo, hi):
    return {"reward_mean": mean, "reward_ci95": [lo, hi]}


@pytest.mark.parametrize("row, words", [
    (_row(0.218, 0.203, 0.232), "just under the rule-based expert (-0.019"),
    (_row(0.10, 0.05, 0.15), "under the rule-based expert (-0.137"),
    (_row(0.26, 0.245, 0.275), "just above the rule-based expert (+0.023"),
    (_row(0.23, 0.21, 0.25), "level with the rule-based expert (-0.007, within its 95% CI)"),
])
def test_the_headline_verdict_is_read_off_the_cis(row, words):
    expert, start = _row(0.237, 0.225, 0.25), _row(-1.0, -1.0, -1.0)
    text = story.verdict(row, start, expert)
    assert words in text and text.startswith("**Yes:**")
    assert "just" not in text or abs(row["reward_mean"] - 0.237) < 0.05
    assert story.verdict(_row(-0.99, -1.0, -0.98), start, expert).startswith("**No:**")  # its CI reaches the start


def test_the_details_say_why_the_seat_holds_its_model(monkeypatch):
    from pathlib import Path

    from space.model import ENV_VAR, headline_checkpoint, seat_scores
    if Path(model_path()).resolve() != headline_checkpoint().resolve():  # a seat named by the variable: said so
        assert f"${ENV_VAR} names" in story.details(model_path())
    monkeypatch.delenv(ENV_VAR, raising=False)  # the seat the rule picks
    text = story.details(model_path())
    scores = seat_scores()
    assert scores and "The model seat holds the shipped buyer with the best mean reward" in text
    for _folder, buyer, vals, mean in scores:  # every candidate with the numbers the rule read
        assert f"{F.display_name(buyer)} " in text and f"{mean:+.3f}" in text
    best = max(scores, key=lambda c: c[3])
    assert best[0] == headline_checkpoint()


def test_the_market_sentence_says_what_the_trained_lab_does_from_the_artifact():
    from env.market import POLICIES
    rows = F.market_same_seeds()
    grpo = {t: next(r for r in rs if r["policy"] == "smollm2_market_grpo") for t, rs in rows.items()}
    text = F.market_lab_sentence("smollm2_market_grpo")
    idle = all(not any(r.get(k) for k in F.ACTIVITY) and not r["invalid_rate"] for r in grpo.values())
    assert ("waits at every move" in text) == idle
    for t, rs in rows.items():
        scripted = {r["policy"]: r for r in rs if r["policy"] in POLICIES}
        assert f"{t} {grpo[t]['reward_mean']:+.3f}" in text and f"expert {scripted['expert']['reward_mean']:+.3f}" in text
    sft = F.market_lab_sentence("smollm2_market_sft")
    assert "refused" in sft and "waits at every move" not in sft
    assert "No evaluation row" in F.market_lab_sentence("no_such_lab")
