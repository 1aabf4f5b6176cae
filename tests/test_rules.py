"""Reward and legality: hand-worked cases and invariants."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from env.bargain import rules
from env.bargain.protocol import Action


@pytest.mark.parametrize("budget,cost,price,expected", [
    (160, 100, 100, 1.0),      # paid exactly the cost: the whole surplus
    (160, 100, 130, 0.5),      # (160-130)/60
    (160, 100, 160, 0.0),      # paid the whole budget
    (160, 100, 70, 1.0),       # below cost is clipped at 1 (the env never allows it anyway)
    (160, 100, 160.01, -1.0),  # a cent over budget
    (80, 90, 80, 0.0),         # conflicting interest, at budget: 0/|80-90|
    (80, 90, 75, 0.5),         # conflicting interest: (80-75)/10
    (100.5, 100, 100, 0.5),    # |B-C| = 0.5 is floored at $1: (100.5-100)/1
])
def test_deal_reward_hand_worked(budget, cost, price, expected):
    assert rules.deal_reward(budget, cost, price) == pytest.approx(expected)


@pytest.mark.parametrize("reason,expected", [
    (rules.END_BUYER_QUIT, 0.0), (rules.END_SELLER_QUIT, 0.0), (rules.END_TURN_LIMIT, 0.0),
    (rules.END_BUYER_FORMAT, -1.0), (rules.END_BUYER_INVALID, -1.0), (rules.END_OVER_BUDGET, -1.0),
])
def test_end_rewards_without_deal(reason, expected):
    assert rules.end_reward(reason, 160, 100, None) == expected


money = st.floats(0.01, 1e7, allow_nan=False, allow_infinity=False)


@given(money, money, money)
def test_reward_bounds(budget, cost, price):
    r = rules.deal_reward(budget, cost, price)
    assert -1.0 <= r <= 1.0 and math.isfinite(r)
    if price > budget:
        assert r == -1.0


@pytest.mark.parametrize("role,action,value,their,expected", [
    ("buyer", Action("BUY", 150), 160, None, None),
    ("buyer", Action("BUY", 161), 160, None, rules.E_OVER_BUDGET),
    ("buyer", Action("SELL", 150), 160, None, rules.E_WRONG_ROLE),
    ("buyer", Action("DEAL", 150), 160, None, rules.E_NO_OFFER),
    ("buyer", Action("DEAL", 150), 160, 150.005, None),          # within a cent
    ("buyer", Action("DEAL", 150), 160, 151, rules.E_DEAL_MISMATCH),
    ("buyer", Action("DEAL", 170), 160, 170, rules.E_OVER_BUDGET),
    ("seller", Action("SELL", 99), 100, None, rules.E_BELOW_COST),
    ("seller", Action("SELL", 100), 100, None, None),
    ("seller", Action("BUY", 120), 100, None, rules.E_WRONG_ROLE),
    ("seller", Action("DEAL", 90), 100, 90, rules.E_BELOW_COST),
    ("seller", Action("REJECT"), 100, None, None),
    ("buyer", Action("QUIT"), 160, None, None),
])
def test_check_move(role, action, value, their, expected):
    assert rules.check_move(role, action, value, their) == expected
