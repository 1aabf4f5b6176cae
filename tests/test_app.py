"""The Space's functions (the full UI is tested where it is built out)."""

from __future__ import annotations

import gradio as gr
import pytest

import app


def test_stats_and_play():
    rows = app.scenario_stats()
    builtin = next(r for r in rows if r[0] == "builtin")
    assert builtin[1] >= 300 and builtin[2] + builtin[3] == builtin[1]
    messages, summary = app.play("builtin", "expert", "begging", 2, 5, "option_b")
    assert messages and all(m["role"] in ("user", "assistant") for m in messages)
    assert any(m.get("metadata") for m in messages), "private reasoning is shown in collapsible messages"
    assert "reward" in summary


@pytest.mark.parametrize("args", [
    ("builtin", "expert", "nobody", 0, 0, "option_a"),
    ("builtin", "expert", "neutral", -1, 0, "option_a"),
    ("builtin", "expert", "neutral", 0, -5, "option_a"),
    ("nowhere", "expert", "neutral", 0, 0, "option_a"),
])
def test_bad_input_is_a_clear_error(args):
    with pytest.raises(gr.Error):
        app.play(*args)


def test_builds():
    assert isinstance(app.build(), gr.Blocks)
