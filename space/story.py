"""The Space's first screen: did it learn? One sentence about the model in the model seat (what base, how it was
trained, on what hardware, and what it scores against the expert and the ceiling) and one chart: every buyer's
reward on held-out products with 95% CIs, the expert and the oracle ceiling as reference lines, the model in the
seat highlighted, for the builtin test split and for products from another source (Amazon). Every number is read
from ``artifacts/`` (the evaluation files and the checkpoint's own records)."""

from __future__ import annotations

import re

import plotly.graph_objects as go

from space import figures as F
from space.card import millions, card_facts

GENERALISATION = ("eval_generalisation.json", "eval_generalisation_smollm2.json")  # the tiny run's, SmolLM2's
HIGHLIGHT, OTHER, SCRIPTED = "#d62728", "#9aa5b1", "#4c72b0"
STAGE_WORDS = {"sft": "SFT", "grpo": "GRPO", "sdpo": "SDPO"}


def _mix(name: str | tuple[str, ...], study: str | None = None) -> dict[str, dict]:
    """Seller-mix rows by buyer (of ``study`` when given); from several files, the first file's row of a buyer."""
    out: dict[str, dict] = {}
    for n in (name,) if isinstance(name, str) else name:
        for r in F.eval_rows(n, "mix"):
            if study is None or r.get("study") == study:
                out.setdefault(r["buyer"], r)
    return out


def untrained_name(buyer: str) -> str:
    """The row of the untrained start of ``buyer``'s family: ``base`` for the tiny model's stages,
    ``smollm2_base`` for ``smollm2_grpo``."""
    prefix = buyer.rsplit("_", 1)[0] + "_" if "_" in buyer else ""
    return f"{prefix}base"


def _hardware(machine: str | None) -> str:
    if not machine:
        return "an unrecorded machine"
    gpu = re.search(r"GPU ([^,]+)", machine)
    cpus = re.search(r"(\d+) CPUs", machine)
    return f"one {gpu.group(1)}" if gpu else f"a {cpus.group(1)}-core CPU, no GPU" if cpus else machine


def _stage(t: dict) -> str:
    return t["curve"].split("/")[-1].split("_training_curve")[0].split("_")[0].rstrip("0123456789")  # grpo9_... -> grpo


def _stage_text(t: dict) -> str:
    stage = _stage(t)
    what = (f" on {t['games']:,} {t['cloned']} games" if t.get("games") else
            f" on {t['episodes']:,} episodes against the live environment" if t.get("episodes") else "")
    return f"{STAGE_WORDS.get(stage, stage)}{what}"


def sentence(folder: str) -> str:
    """The first screen's sentence about the model in ``folder`` (the model seat): what it is, how and where it was
    trained, and its reward on held-out products beside the untrained start, the expert and the ceiling."""
    f = card_facts(folder)
    base = (f"a {millions(f.get('parameters'))}-parameter model built from scratch here" if f["base_model"] == "haggle-tiny"
            else f"a LoRA adapter over {f['base_model'].split('/')[-1]}" if f["adapter"] else f["base_model"])
    trained = [t for t in f["training"] if t.get("command")]
    how = " then ".join(STAGE_WORDS.get(_stage(t), _stage(t)) for t in trained) or "no recorded training"
    where = _hardware(trained[-1].get("machine") if trained else None)
    text = f"**Did it learn?** **{_seat_name(f)}** ({base}; {how} on {where})"
    row, rows = f["evaluation"], _mix(f["eval_file"])
    if row is None:
        return text + f" has no evaluation row yet (`{f['eval_buyer']}` in `{f['eval_file']}`)."
    expert, oracle = rows.get("expert"), next((r for r in rows.values() if r.get("upper_bound")), None)
    start = rows.get(untrained_name(f["eval_buyer"]))
    refs = ([f"untrained {start['reward_mean']:+.3f}"] if start else []) + (
        [f"rule-based expert {expert['reward_mean']:+.3f}"] if expert else []) + (
        [f"ceiling {oracle['reward_mean']:+.3f}"] if oracle else [])
    text += (f" scores **{row['reward_mean']:+.3f}** {F.ci_text(row)} on held-out products against the seller mix"
             + (f" ({'; '.join(refs)})" if refs else ""))
    return text + "." + (f" {verdict(row, start, expert)}" if expert else "")


def verdict(row: dict, start: dict | None, expert: dict) -> str:
    """The headline's answer in words, read off the 95% CIs: learned (above its untrained start) or not, and where it
    stands against the rule-based expert (above or under it when its CI lies on one side of the expert's mean,
    level with it otherwise; "just" within 0.05)."""
    lo, hi = row["reward_ci95"]
    gap, e = row["reward_mean"] - expert["reward_mean"], expert["reward_mean"]
    near = "just " if abs(gap) < 0.05 else ""
    where = (f"{near}above the rule-based expert ({gap:+.3f}; its 95% CI lies above the expert's mean)" if lo > e else
             f"{near}under the rule-based expert ({gap:+.3f}; its 95% CI ends below the expert's mean)" if hi < e else
             f"level with the rule-based expert ({gap:+.3f}, within its 95% CI)")
    if start is None:  # no untrained row to compare with: where it stands, without a yes or no
        return where[0].upper() + where[1:] + "."
    learned = lo > start["reward_mean"]
    return (f"**{'Yes' if learned else 'No'}:** {'far above its untrained start, ' if learned else ''}{where}.")


def _seat_name(f: dict) -> str:
    """The seat's model as the charts name it ("SmolLM2 GRPO"), with its folder."""
    return f"{F.display_name(f['eval_buyer'])} (`{f['name']}`)" if f.get("eval_buyer") else f["name"]


def details(folder: str) -> str:
    """The line under the charts: how long each stage trained on what, and the other source's numbers."""
    f = card_facts(folder)
    trained = [t for t in f["training"] if t.get("command")]
    hours = sum(t.get("wall_time_s") or 0 for t in trained) / 3600
    parts = [f"{_seat_name(f)} trained by " + ", then ".join(_stage_text(t) for t in trained) + f" ({hours:.1f} h)"] \
        if trained else []
    other = _mix(GENERALISATION, "a_other_source")
    if f["eval_buyer"] in other:
        parts.append(f"on products from another source (Amazon) it scores {other[f['eval_buyer']]['reward_mean']:+.3f}"
                     + (f" against the expert's {other['expert']['reward_mean']:+.3f}" if "expert" in other else ""))
    parts.append("the ceiling is a buyer told each seller's floor")
    return "; ".join(parts) + ". " + seat_rule()


def seat_rule() -> str:
    """Why this model holds the seat, from the numbers the rule reads (``space.model.seat_scores``)."""
    from pathlib import Path  # noqa: PLC0415

    from space.model import ENV_VAR, best_seat, model_path, seat_scores  # noqa: PLC0415

    candidates = seat_scores()
    if Path(model_path()).resolve() != best_seat(candidates).resolve():
        return f"The model seat holds the model ${ENV_VAR} names, not the one the seat rule would pick."
    scores = sorted(candidates, key=lambda c: -c[3])
    if not scores:
        return ""
    both = len(scores[0][2]) > 1
    each = "; ".join(f"{F.display_name(b)} " + (" and ".join(f"{v:+.3f}" for v in vals) + f" (mean {mean:+.3f})"
                                                if both else f"{mean:+.3f}") for _, b, vals, mean in scores)
    return ("The model seat holds the shipped buyer with the best mean reward over "
            + ("both product sources (builtin test split, then Amazon): " if both else "the builtin test split: ")
            + each + ". Bars named *tiny* are " + _tiny_words() + "; *SmolLM2* bars are the pretrained "
            "SmolLM2-135M-Instruct with LoRA adapters.")


def _tiny_words() -> str:
    from space.model import SHIPPED  # noqa: PLC0415

    size = card_facts(SHIPPED).get("parameters") if SHIPPED.is_dir() else None
    return f"the {millions(size)}-parameter model built and trained from scratch here" if size else \
        "the small model built and trained from scratch here"


def _bars(fig: go.Figure, rows: dict[str, dict], highlight: str) -> None:
    shown = [r for b, r in rows.items() if not r.get("upper_bound") and b != "expert"]
    scripted = [r for r in shown if not _trained(r["buyer"])]
    best = max(scripted, key=lambda r: r["reward_mean"], default=None)
    bars = [r for r in shown if _trained(r["buyer"])] + ([best] if best else [])
    bars.sort(key=lambda r: r["reward_mean"])
    ci = [r.get("reward_ci95") or [r["reward_mean"]] * 2 for r in bars]
    fig.add_bar(x=[r["reward_mean"] for r in bars], y=[_name(r, best) for r in bars], orientation="h",
                marker_color=[HIGHLIGHT if r["buyer"] == highlight else SCRIPTED if r is best else OTHER for r in bars],
                error_x={"type": "data", "symmetric": False, "array": [c[1] - r["reward_mean"] for c, r in zip(ci, bars)],
                         "arrayminus": [r["reward_mean"] - c[0] for c, r in zip(ci, bars)], "thickness": 1.2},
                customdata=[[r["episodes"], c[0], c[1]] for r, c in zip(bars, ci)], showlegend=False,
                hovertemplate="%{y}: %{x:+.3f} [%{customdata[1]:+.3f}, %{customdata[2]:+.3f}], %{customdata[0]} "
                              "episodes<extra></extra>")
    # both labels above the plot, the ceiling's a line higher: close values never print over each other
    for buyer, dash, label, shift in (("expert", "dash", "expert", 0), (None, "dot", "ceiling", 13)):
        r = rows.get(buyer) if buyer else next((r for r in rows.values() if r.get("upper_bound")), None)
        if r:
            fig.add_vline(x=r["reward_mean"], line_dash=dash, line_color="#333",
                          annotation_text=f"{label} {r['reward_mean']:+.2f}", annotation_position="top",
                          annotation_font_size=10, annotation_yshift=shift)


def _trained(buyer: str) -> bool:
    return buyer in F.TRAINED or buyer.startswith("smollm2")


def _name(r: dict, best: dict | None) -> str:
    return f"{r['buyer']} (best baseline)" if r is best else F.display_name(r["buyer"])


def chart(folder: str, which: str = "builtin") -> go.Figure:
    """The reward of every trained buyer and the best baseline on held-out products (``builtin``: the test split
    against the seller mix; ``amazon``: the other source, generalisation study (a)), with 95% CIs, the expert and
    the ceiling as lines, and the model in the seat in red."""
    f = card_facts(folder)
    # the seat model's own evaluation file first (its expert and ceiling rows are on its episodes), then the others'
    rows = (_mix((f["eval_file"], *F.EVAL_FILES)) if which == "builtin" else _mix(GENERALISATION, "a_other_source"))
    title = ("Held-out test products (builtin catalog)" if which == "builtin" else
             "Products from another source (Amazon test split)")
    if not rows:
        return F._empty(title, "no evaluation yet: run python training/pipeline.py")
    fig = go.Figure()
    _bars(fig, rows, f["eval_buyer"])
    fig.update_xaxes(title_text="buyer reward (95% CI)", range=[-1.05, 0.8], title_font_size=11)
    fig.update_layout(title={"text": title, "font": {"size": 14}}, height=300, bargap=0.25,
                      margin={"l": 10, "r": 10, "t": 70, "b": 45})
    return fig
