"""The thought-consistency checker: reads the comparisons a buyer's Thought states and checks them against the
truth; the expert's own Thoughts are always true; any text is survived."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from env.bargain.consistency import Claim, check, claims, standing_prices, verdicts
from env.bargain.players.buyers import compare_digits
from env.bargain.protocol import format_price


@pytest.mark.parametrize("text, ask, budget, true", [
    ("Ask $150.00 vs budget $155.19: 1=1, 5=5, 0<5: over budget. Walk away.", 150.0, 155.19, 0),  # the seat's error
    ("Ask $150.00 vs budget $155.19: 1=1, 5=5, 0<5: within budget.", 150.0, 155.19, 1),
    ("Ask $407.00 vs budget $418.39: over budget.", 407.0, 418.39, 0),
    ("Ask $1,250.50 vs budget $1,200.00: 4 digits vs 4: over budget.", 1250.5, 1200.0, 1),
    ("The ask of $90 is within my budget of $120, accept.", 90.0, 120.0, 1),
    ("ask $130 is under budget ($120)", 130.0, 120.0, 0),
    ("Ask $99.00 vs budget $120.00: within budget.", 98.0, 120.0, 0),  # not the ask standing
    ("Ask $99.00 vs budget $125.00: within budget.", 99.0, 120.0, 0),  # not its budget
])
def test_stated_comparisons_are_checked_against_the_turns_truth(text, ask, budget, true):
    got = check(text, ask, budget)
    assert got["claims"] == 1 and got["true"] == true and len(got["false"]) == 1 - true


def test_a_thought_without_a_comparison_has_nothing_to_be_wrong_about():
    assert check("No ask yet. Open at 60% of list $100.00.", None, 80.0) == {"claims": 0, "true": 0, "false": []}
    assert claims("budget is tight; offer more") == []


def test_an_offer_claim_is_checked_against_the_buyers_own_offer():
    assert check("Offer $70.00 vs budget $80.00: within budget.", 90.0, 80.0, offer=70.0)["true"] == 1
    assert check("Offer $70.00 vs budget $80.00: over budget.", 90.0, 80.0, offer=70.0)["true"] == 0


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**7), st.integers(1, 10**7))
def test_the_experts_comparison_is_always_read_and_true(ask_cents, budget_cents):
    """The expert's own Thought line, on any prices: read as one claim, and true."""
    ask, budget = ask_cents / 100, budget_cents / 100
    over = ask > budget
    text = (f"Ask {format_price(ask)} vs budget {format_price(budget)}: {compare_digits(ask, budget)}: "
            + ("over budget." if over else "within budget.") + " Counter.")
    assert claims(text) == [Claim("ask", ask, budget, over)]
    assert check(text, ask, budget)["true"] == 1


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300), st.one_of(st.none(), st.floats(0, 1e6)), st.floats(0.01, 1e6))
def test_any_text_is_survived(text, ask, budget):
    got = check(text, ask, budget)
    assert 0 <= got["true"] <= got["claims"] and len(got["false"]) == got["claims"] - got["true"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="Askvbudgetoverwithin $0123456789.,:", max_size=200))
def test_text_made_of_the_claims_own_words_is_survived(text):
    for c in claims(text):
        assert c.what in ("ask", "offer") and c.price >= 0 and c.budget >= 0


def test_the_environment_scores_each_buyer_thought_against_its_own_turn(scenario):
    """Budget $160: the buyer's first Thought calls its $90 offer within budget (true), its second calls the
    standing $170 ask within budget (false); the seller's Thought, which also states a comparison, is not scored;
    the episode's metrics and the evaluation row carry the counts."""
    from env.bargain.evaluation import summarize
    from tests.conftest import reply, run_replies

    env, _ = run_replies(scenario, [
        reply("[BUY] $90", thought="Offer $90.00 vs budget $160.00: within budget."),
        reply("[SELL] $170", thought="Ask $170.00 vs budget $1.00: over budget."),
        reply("[BUY] $95", thought="Ask $170.00 vs budget $160.00: within budget."),
        reply("[SELL] $150"),
        reply("[DEAL] $150", thought="no comparison here"),
    ])
    m = env.metrics()
    assert (m.thought_claims, m.thought_claims_true) == (2, 1)
    row = summarize([m, m])
    assert row["thought_claims"] == 4 and row["thought_consistency"] == 0.5
    assert summarize([m._replace(thought_claims=0, thought_claims_true=0)])["thought_consistency"] is None


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**6), st.integers(1, 10**6), st.sampled_from(["over", "within", "above", "under", "below"]),
       st.sampled_from(["Ask {a} vs budget {b}: {v} budget. Offer $1.00.", "the ask of {a} is {v} my budget of {b}",
                        "Thinking. Ask {a} vs my budget {b} -> {v} budget"]))
def test_each_verdict_is_located_and_its_true_word_makes_the_claim_true(ask_cents, budget_cents, word, form):
    """What a verdict-teaching stage trains on: the verdict word's place, whether it is true, and the word the truth
    calls for; writing that word in its place makes the Thought's claim true."""
    ask, budget = ask_cents / 100, budget_cents / 100
    text = form.format(a=format_price(ask), b=format_price(budget), v=word)
    [(at, true, want)] = verdicts(text, ask, budget)
    assert text[at:].startswith(word)
    assert want == ("over" if ask > budget else "within")
    assert true == (check(text, ask, budget)["true"] == 1)
    fixed = text[:at] + want + text[at + len(word):]
    assert check(fixed, ask, budget)["true"] == 1


def test_a_claim_that_misnames_a_price_gets_no_verdict_label():
    text = "Ask $120.00 vs budget $150.00: within budget. Offer vs budget $150.00."
    assert check(text, 130.0, 150.0)["true"] == 0
    assert verdicts(text, 130.0, 150.0) == [] and verdicts(text, 120.0, 149.0) == []
    assert verdicts(text, 120.0, 150.0) == [(text.index("within"), True, "within")]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(50, 250), st.sampled_from(["over", "within"]), st.sampled_from(["ask", "offer"])),
                min_size=2, max_size=12))
def test_standing_prices_recover_what_the_environment_checked_each_thought_against(moves):
    """Any run of moves (seller asks below cost are blocked, a buyer offer over budget ends the game): the claims
    checked against ``standing_prices`` of the transcript are true exactly as often as the environment counted."""
    from env.bargain.env import BargainEnv
    from env.bargain.sources import make_scenario
    from tests.conftest import reply

    env = BargainEnv(6)
    env.reset(0, {"scenario": make_scenario("Test Kettle", "A kettle.", "home-kitchen", 200.0, 100.0, "test")})
    ask = None
    for k, (price, word, what) in enumerate(moves):
        if k % 2:  # the seller: prices under its cost ($100) are blocked
            step = env.step(reply(f"[SELL] ${price}", thought=f"Ask ${price}.00 vs budget $1.00: over budget."))
            ask = price if price >= 100 and step.info.get("error") is None else ask
        else:
            named = ask if what == "ask" else price
            thought = (f"{what} ${named}.00 vs budget $160.00: {word} budget." if named is not None else "No ask yet.")
            step = env.step(reply(f"[BUY] ${price}", thought=thought))
        if step.done:
            break
    turns, budget = env.transcript()["turns"], 160.0
    found = [check(turns[i]["thought"] or "", a, budget, o) for i, a, o in standing_prices(turns)]
    m = env.metrics()
    assert sum(f["claims"] for f in found) == m.thought_claims and sum(f["true"] for f in found) == m.thought_claims_true
    assert [i for i, *_ in standing_prices(turns)] == [i for i, t in enumerate(turns) if t["role"] == "buyer"]
