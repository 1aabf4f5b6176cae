"""Pure functions from ``artifacts/`` to the Space's tables and plotly figures.

Nothing here makes up a number: every value is read from an artifact file a script in
``training/`` or ``benchmarks/`` wrote, and every figure names the file it came from. A
missing artifact gives an empty figure that says which command writes it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from training.common.provenance import REPO_DIRS, relative  # noqa: F401  (shown in the Space)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
EVAL_FILES = ("eval_results.json", "eval_scripted.json")
TRAINED = ("base", "sft", "grpo", "sdpo")  # canonical names of model buyers (the artifact contract)
RL_CURVES = {"grpo": "grpo_training_curve.json", "sdpo": "sdpo_training_curve.json",
             "smollm2_grpo": "grpo_smollm2_training_curve.json"}
SFT_CURVES = {"tiny SFT": "sft_training_curve.json", "tiny SFT (<think> format)": "sft_option_b_training_curve.json",
              "SmolLM2 SFT (LoRA)": "sft_smollm2_training_curve.json"}
SFT_COLORS = {"tiny SFT": "#1f77b4", "tiny SFT (<think> format)": "#17becf", "SmolLM2 SFT (LoRA)": "#ff7f0e"}
RL_COLORS = {"grpo": "#d62728", "sdpo": "#9467bd", "smollm2_grpo": "#ff7f0e"}
# model families by the prefix of their evaluation names; unprefixed training-stage names are the tiny model's
FAMILIES = (("smollm2_market_", "SmolLM2"), ("smollm2_", "SmolLM2"), ("tiny_", "tiny"))
STAGES = {"base": "untrained", "sft": "SFT", "grpo": "GRPO", "sdpo": "SDPO", "sft_option_b": "SFT (<think> format)"}
LEGEND_BELOW = {"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0, "font": {"size": 11}}
RL_METRICS = {"reward_mean": "mean reward", "deal_rate": "deal rate", "first_offer_ratio": "first offer / budget",
              "turns_mean": "turns per episode", "format_error_rate": "format-error rate",
              "frac_reward_zero_std": "groups with zero reward spread"}
TABLE_COLUMNS = ["buyer", "seller", "episodes", "reward", "95% CI", "std", "deal rate", "bargained ratio",
                 "first offer / budget", "overshoot", "format errors"]


# ---------------------------------------------------------------------- reading
def read_artifact(name: str) -> dict | None:
    """An artifact JSON by its path under ``artifacts/``, or None when it is absent."""
    path = artifact_path(name)
    return _read(str(path), path.stat().st_mtime) if path.is_file() else None


@lru_cache(maxsize=64)
def _read(path: str, mtime: float) -> dict:
    return json.loads(Path(path).read_text())


def artifact_path(name: str) -> Path:
    """``name`` resolved inside ``artifacts/``; anything that points outside is refused."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError("artifact name must be a path under artifacts/, e.g. eval_results.json")
    path = (ARTIFACTS / name).resolve()
    if ARTIFACTS.resolve() not in path.parents:
        raise ValueError(f"{name!r} is not inside artifacts/")
    return path


def list_artifacts() -> list[dict]:
    """Every file in ``artifacts/`` with its size and, for JSON, its provenance."""
    out = []
    for path in sorted(p for p in ARTIFACTS.rglob("*") if p.is_file()):
        rel = path.relative_to(ARTIFACTS).as_posix()
        prov = {}
        if path.suffix == ".json":
            try:
                prov = (read_artifact(rel) or {}).get("provenance") or {}
            except (json.JSONDecodeError, AttributeError):
                prov = {}
        out.append({"file": rel, "bytes": path.stat().st_size, "command": relative(prov.get("command", "")),
                    "commit": str(prov.get("commit", ""))[:12], "date": prov.get("date", ""),
                    "wall_time_s": prov.get("wall_time_s"), "machine": prov.get("machine", "")})
    return out




def provenance_line(data: dict | None, name: str) -> str:
    if not data or "provenance" not in data:
        return f"`{name}`: not produced yet."
    p = data["provenance"]
    wall = f", {p['wall_time_s']:.0f} s" if isinstance(p.get("wall_time_s"), (int, float)) else ""
    commit = str(p.get("commit", "?"))
    commit = commit[:12] + (" (with uncommitted changes)" if commit.endswith("-dirty") else "")
    return (f"From `artifacts/{name}`: `{relative(p.get('command', '?'))}` at commit `{commit}`, "
            f"{p.get('date', '?')}, {p.get('machine', '?')}{wall}.")


def eval_rows(name: str, seller: str | None = None) -> list[dict]:
    data = read_artifact(name) or {}
    rows = data.get("rows", [])
    return [r for r in rows if seller is None or r.get("seller") == seller]


def _f(x, fmt: str = "{:+.3f}") -> str:
    return "–" if x is None else fmt.format(x)


def ci_text(row: dict) -> str:
    """A row's 95% CI of the reward, as the tables and cards print it."""
    lo, hi = row["reward_ci95"]
    return f"[{lo:+.3f}, {hi:+.3f}]"


def display_name(name: str) -> str:
    """A player as a visitor reads it: a trained model by family and stage (``smollm2_grpo``: "SmolLM2 GRPO",
    ``grpo``: "tiny GRPO", the 3.4M-parameter model built here), any other name as it is."""
    for prefix, family in FAMILIES:
        if name.startswith(prefix):
            stage = name[len(prefix):]
            return f"{family} {STAGES.get(stage, stage)}"
    return f"tiny {STAGES[name]}" if name in STAGES else name


def _label(row: dict) -> str:
    name = display_name(row["buyer"])
    if row.get("upper_bound"):
        return f"{name} (upper bound)"
    if row.get("episodes_subset"):  # a slow model evaluated on the first products only: say so
        return f"{name} ({row['episodes']} episodes: first products only)"
    return name


def eval_table(name: str, seller: str = "mix") -> list[list]:
    """Rows for a table: one per buyer against ``seller`` (``mix`` = the whole seller mix)."""
    out = []
    for r in eval_rows(name, seller):
        out.append([_label(r), r["seller"], r["episodes"], _f(r["reward_mean"]), ci_text(r),
                    _f(r["reward_std"], "{:.3f}"), _f(r["deal_rate"], "{:.1%}"), _f(r["bargained_ratio"], "{:.3f}"),
                    _f(r["first_offer_ratio"], "{:.3f}"), _f(r["overshoot_rate"], "{:.1%}"),
                    _f(r["format_error_rate"], "{:.1%}")])
    return out


GENERALISATION_COLUMNS = ["study", "buyer", "seller", "episodes", "reward", "95% CI", "deal rate", "overshoot",
                          "format errors"]


def generalisation_table(name: str = "eval_generalisation.json") -> list[list]:
    """One row per buyer and study (each study's pooled row: ``mix``, or its one seller); a study
    that did not run says why."""
    studies = (read_artifact(name) or {}).get("studies", {})
    out = []
    for study, s in studies.items():
        rows = s.get("rows", [])
        if not s.get("ran"):
            out.append([f"{study}: {s.get('question', '')}", "not run", s.get("why_not", ""), "", "", "", "", "", ""])
            continue
        pooled = [r for r in rows if r["seller"] == "mix"] or rows
        for r in pooled:
            out.append([f"{study}: {s.get('question', '')}", _label(r), r["seller"], r["episodes"], _f(r["reward_mean"]),
                        ci_text(r), _f(r["deal_rate"], "{:.1%}"), _f(r["overshoot_rate"], "{:.1%}"),
                        _f(r["format_error_rate"], "{:.1%}")])
    return out


def _empty(title: str, why: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, annotations=[{"text": why, "showarrow": False, "x": 0.5, "y": 0.5,
                                                  "xref": "paper", "yref": "paper"}],
                      xaxis={"visible": False}, yaxis={"visible": False}, height=320)
    return fig


# ---------------------------------------------------------------------- evaluation
def reward_bars(name: str, seller: str = "mix") -> go.Figure:
    """Mean reward per buyer with whiskers for one standard deviation (thin) and the 95% CI (thick)."""
    rows = sorted(eval_rows(name, seller), key=lambda r: r["reward_mean"])
    ceiling = next((r for r in rows if r.get("upper_bound")), None)
    rows = [r for r in rows if not r.get("upper_bound")]
    if not rows:
        return _empty("Mean reward per buyer", f"no rows in artifacts/{name}")
    names = [_label(r) for r in rows]
    means = [r["reward_mean"] for r in rows]
    colors = ["#d62728" if r["buyer"].startswith(TRAINED) or r["buyer"].startswith("smollm2") else "#1f77b4"
              for r in rows]
    fig = go.Figure()
    fig.add_bar(y=names, x=means, orientation="h", marker_color=colors, name="mean reward", opacity=0.55,
                error_x={"type": "data", "symmetric": True, "array": [r["reward_std"] for r in rows],
                         "thickness": 1, "color": "#888"},
                hovertemplate="%{y}: %{x:+.3f}<extra>mean ± std</extra>")
    fig.add_scatter(y=names, x=means, mode="markers", name="95% CI", marker={"color": "black", "size": 6},
                    error_x={"type": "data", "symmetric": False,
                             "array": [r["reward_ci95"][1] - r["reward_mean"] for r in rows],
                             "arrayminus": [r["reward_mean"] - r["reward_ci95"][0] for r in rows],
                             "thickness": 3, "color": "black"})
    fig.update_layout(title={"text": f"Mean buyer reward vs seller '{seller}'", "y": 0.98, "yanchor": "top"},
                      xaxis_title="reward (thin whisker: ±1 std; thick: 95% CI; red: model buyers; dashed: the "
                                  "ceiling, an oracle told the seller's floor)",
                      height=160 + 28 * len(rows),
                      showlegend=False, margin={"l": 10, "t": 80}, yaxis={"automargin": True})
    if ceiling:  # the oracle is told the seller's floor: where the best possible buyer sits, not a rival
        fig.add_vline(x=ceiling["reward_mean"], line_dash="dash", line_color="#2ca02c",
                      annotation_text=f"ceiling {ceiling['reward_mean']:+.3f}", annotation_position="top",
                      annotation_font_size=10)
    return fig


def heatmap(name: str, metric: str = "reward_mean") -> go.Figure:
    """Buyer x seller grid of one metric (the mix column included)."""
    rows = eval_rows(name)
    if not rows:
        return _empty("Buyer x seller", f"no rows in artifacts/{name}")
    buyers = list(dict.fromkeys(_label(r) for r in rows))
    sellers = list(dict.fromkeys(r["seller"] for r in rows))
    cell = {(_label(r), r["seller"]): r.get(metric) for r in rows}
    z = [[cell.get((b, s)) for s in sellers] for b in buyers]
    text = [["" if v is None else f"{v:+.2f}" if metric == "reward_mean" else f"{v:.2f}" for v in row] for row in z]
    fig = go.Figure(go.Heatmap(z=z, x=sellers, y=buyers, text=text, texttemplate="%{text}", colorscale="RdBu",
                               zmid=0 if metric == "reward_mean" else None, colorbar={"title": metric}))
    fig.update_layout(title=f"{metric} by buyer and seller ({name})", height=160 + 32 * len(buyers),
                      margin={"l": 10}, yaxis={"automargin": True}, xaxis={"automargin": True, "tickangle": -30})
    return fig


def interest_bars(name: str) -> go.Figure:
    """Mean reward on mutual- and conflicting-interest products (budget above or below cost), seller mix."""
    rows = [r for r in eval_rows(name, "mix") if r.get("by_interest")]
    if not rows:
        return _empty("Mutual vs conflicting interest", f"no per-interest rows in artifacts/{name}")
    fig = go.Figure()
    for kind, color in (("mutual", "#2ca02c"), ("conflicting", "#ff7f0e")):
        parts = [r["by_interest"].get(kind) or {} for r in rows]
        fig.add_bar(name=f"{kind} interest", x=[_label(r) for r in rows], y=[p.get("reward_mean") for p in parts],
                    marker_color=color,
                    customdata=[[p.get("episodes"), p.get("deal_rate")] for p in parts],
                    hovertemplate="%{x}: %{y:+.3f} (%{customdata[0]} episodes, deal rate %{customdata[1]:.0%})",
                    error_y={"type": "data", "symmetric": False,
                             "array": [(p["reward_ci95"][1] - p["reward_mean"]) if p else None for p in parts],
                             "arrayminus": [(p["reward_mean"] - p["reward_ci95"][0]) if p else None for p in parts]})
    fig.update_layout(barmode="group", title=f"Mutual vs conflicting interest, seller mix (95% CI) — {name}",
                      yaxis_title="mean reward", height=380)
    return fig


def headline(name: str = "eval_results.json") -> str:
    """One line per model buyer against the seller mix, next to the expert and the best baseline."""
    rows = {r["buyer"]: r for r in eval_rows(name, "mix")}
    if not rows:
        return f"No evaluation of trained buyers yet (`artifacts/{name}`): run `python training/pipeline.py`."
    lines = []
    models = [b for b in rows if b.startswith("smollm2")]  # the pretrained LLM's rows, where present
    for b in ("expert", *TRAINED, *models):
        if b in rows:
            r = rows[b]
            lines.append(f"| {_label(r)} | {r['reward_mean']:+.3f} | {ci_text(r)} "
                         f"| {r['deal_rate']:.1%} | {r['overshoot_rate']:.1%} | {r['format_error_rate']:.1%} |")
    scripted = [r for b, r in rows.items() if b != "expert" and not b.startswith((*TRAINED, "smollm2"))
                and not r.get("upper_bound")]
    best = max(scripted, key=lambda r: r["reward_mean"], default=None)
    if best:
        lines.append(f"| best baseline: {best['buyer']} | {best['reward_mean']:+.3f} | "
                     f"{ci_text(best)} | {best['deal_rate']:.1%} "
                     f"| {best['overshoot_rate']:.1%} | {best['format_error_rate']:.1%} |")
    ceiling = next((r for r in rows.values() if r.get("upper_bound")), None)
    if ceiling:
        lines.append(f"| ceiling: {ceiling['buyer']}, told each seller's floor (an upper bound, not a baseline) | "
                     f"{ceiling['reward_mean']:+.3f} | {ci_text(ceiling)} | {ceiling['deal_rate']:.1%} | {ceiling['overshoot_rate']:.1%} "
                     f"| {ceiling['format_error_rate']:.1%} |")
    r0 = next(iter(rows.values()))
    data = read_artifact(name) or {}
    sampling = data.get("sampling")
    how = (f"\n\nModel buyers above play **{sampling['headline']}** ({sampling['why']}). "
           + "".join(f"At {o}: " + ", ".join(f"{display_name(r['buyer'])} {r['reward_mean']:+.3f}" for r in
                                               data.get("rows_other_sampling", [])
                                               if r["seller"] == "mix" and r.get("sampling") == o) + ". "
                     for o in sampling.get("others", []))) if sampling else ""
    targets = data.get("targets") or {}
    verdicts = "; ".join(f"{k.replace('_', ' ')}: **{'met' if v['met'] else 'missed'}**"
                         for k, v in targets.items() if isinstance(v, dict) and "met" in v)
    return ("| buyer | reward vs seller mix | 95% CI | deal rate | overshoot | format errors |\n|---|---|---|---|---|---|\n"
            + "\n".join(lines) + how + f"\n\n{r0['episodes']} held-out episodes per buyer ({r0['dataset']} test split). "
            + provenance_line(read_artifact(name), name)
            + (f"\n\nTraining targets, checked on these rows by `training/evaluate.py`: {verdicts}." if verdicts else ""))


# ---------------------------------------------------------------------- training
def _points(name: str) -> list[dict]:
    return (read_artifact(name) or {}).get("points", [])


def rl_label(algo: str) -> str:
    """An RL run as its curves name it: the run, its episodes per step, and how far it is when unfinished
    (``smollm2_grpo (32 episodes/step; in progress: step 24 of 48)``)."""
    data = read_artifact(RL_CURVES[algo]) or {}
    pts = data.get("points", [])
    per_step = sorted({p["episodes"] for p in pts if p.get("episodes")})
    parts = [f"{'/'.join(map(str, per_step))} episodes/step"] if per_step else []
    if data.get("complete") is False and pts:
        parts.append(f"in progress: step {pts[-1]['step']} of {data.get('max_steps', '?')}")
    name = display_name(algo)
    return f"{name} ({'; '.join(parts)})" if parts else name


def rl_order(seat: str | None) -> list[str]:
    """The RL runs in drawing order: the run of the model in the seat (``seat_buyer()``) last, so its curve is on
    top of the others."""
    return sorted(RL_CURVES, key=lambda algo: algo == seat)


def seat_buyer() -> str | None:
    """The evaluation name of the model in the model seat (its card's ``eval_buyer``), if it has one."""
    from space.card import card_facts  # noqa: PLC0415
    from space.model import model_path  # noqa: PLC0415
    try:
        return card_facts(model_path()).get("eval_buyer")
    except Exception:  # noqa: BLE001  (no seat here: nothing drawn on top)
        return None


def _rl_width(algo: str, seat: str | None, width: float) -> float:
    return width * 1.6 if algo == seat else width


def sft_loss() -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("SFT loss (buyer tokens only)", "token accuracy"))
    losses = []
    for label, name in SFT_CURVES.items():
        pts = _points(name)
        if not pts:
            continue
        steps, color = [p["step"] for p in pts], SFT_COLORS.get(label, "#444")
        losses += [p.get("loss") for p in pts]
        fig.add_scatter(x=steps, y=[p.get("loss") for p in pts], name=label, legendgroup=label, row=1, col=1,
                        mode="lines+markers", line={"color": color}, marker={"size": 4})
        fig.add_scatter(x=steps, y=[p.get("mean_token_accuracy") for p in pts], name=label, legendgroup=label,
                        row=1, col=2, mode="lines+markers", showlegend=False, line={"color": color},
                        marker={"size": 4})
    if not fig.data:
        return _empty("SFT", "no SFT curve yet: run python training/sft.py")
    ticks, text = log_ticks([v for v in losses if v is not None])
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=text, title_text="loss (log scale)", row=1, col=1)
    fig.update_xaxes(title_text="optimizer step", title_font={"size": 11})
    fig.update_layout(height=400, title="Supervised fine-tuning on expert games (every logged step, unsmoothed)",
                      legend=LEGEND_BELOW, margin={"b": 110})
    return fig


def moving_average(values: list, window: int) -> list:
    """The trailing mean of the last ``window`` values at each point (fewer at the start); None stays None."""
    out = []
    for k in range(len(values)):
        seen = [v for v in values[max(0, k - window + 1):k + 1] if v is not None]
        out.append(sum(seen) / len(seen) if seen else None)
    return out


def smoothing_window(n: int) -> int:
    """Points averaged by the curves' moving average: a tenth of the run, at least 3, at most 20."""
    return max(3, min(20, n // 10))


def reference_lines(fig: go.Figure, name: str = "eval_results.json", **where) -> None:
    """The expert's and the oracle's reward on the held-out test split (seller mix) as horizontal lines: where
    the training reward stands against them (the training episodes are train-split products, so this is a
    yardstick, not the same games)."""
    rows = {r["buyer"]: r for r in eval_rows(name, "mix")}
    oracle = next((r for r in rows.values() if r.get("upper_bound")), None)
    for r, dash, label in ((rows.get("expert"), "dash", "expert"), (oracle, "dot", "ceiling (oracle)")):
        if r:
            fig.add_hline(y=r["reward_mean"], line_dash=dash, line_color="#555", annotation_font_size=10,
                          annotation_text=f"{label} on the test split {r['reward_mean']:+.2f}",
                          annotation_position="top left", **where)


def rl_rewards() -> go.Figure:
    """Per-step mean reward of each RL run (raw, with ±1 std) and its moving average, the expert and the ceiling
    as reference lines, and step 0 (the SFT model RL starts from) marked."""
    fig = go.Figure()
    seat = seat_buyer()
    for algo in rl_order(seat):
        pts = _points(RL_CURVES[algo])
        if not pts:
            continue
        color = RL_COLORS.get(algo, "#444")
        steps = [p["step"] for p in pts]
        mean = [p["reward_mean"] for p in pts]
        std = [p.get("reward_std") or 0.0 for p in pts]
        window, label = smoothing_window(len(pts)), rl_label(algo)
        fig.add_scatter(x=steps + steps[::-1], y=[m + s for m, s in zip(mean, std)] + [m - s for m, s in
                                                                                      zip(mean[::-1], std[::-1])],
                        fill="toself", line={"width": 0}, fillcolor=color, opacity=0.1,
                        name=f"{label} ±1 std", hoverinfo="skip")
        fig.add_scatter(x=steps, y=mean, mode="lines+markers", name=f"{label} per step (raw)",
                        line={"color": color, "width": 1}, marker={"size": 4}, opacity=0.45,
                        customdata=[[p.get("reward_min"), p.get("reward_max"), p.get("episodes")] for p in pts],
                        hovertemplate="step %{x}: %{y:+.3f} (min %{customdata[0]:+.2f}, max %{customdata[1]:+.2f},"
                                      " %{customdata[2]} episodes)")
        fig.add_scatter(x=steps, y=moving_average(mean, window), mode="lines", name=f"{label} moving average "
                        f"({window} steps)" + (": the model seat" if algo == seat else ""),
                        line={"color": color, "width": _rl_width(algo, seat, 3)})
    if not fig.data:
        return _empty("GRPO / SDPO reward", "no RL curve yet: run python training/grpo.py")
    reference_lines(fig)
    fig.add_vline(x=0, line_color="#2ca02c", line_width=2, annotation_text="SFT model: RL starts", annotation_font_size=10,
                  annotation_position="bottom right")
    fig.update_layout(title="Training reward per step against the live environment (raw points and their moving "
                            "average)", xaxis_title="RL step (0: the SFT model)", yaxis_title="buyer reward",
                      height=520, legend=LEGEND_BELOW, margin={"b": 170})
    return fig


def rl_reward_compact() -> go.Figure:
    """The model seat's RL reward per step (raw points and their moving average), for a phone: one run, a short
    title, no legend."""
    algo = next((a for a in reversed(rl_order(seat_buyer())) if _points(RL_CURVES[a])), None)  # the seat's first
    if algo is None:
        return _empty("RL reward", "no RL curve yet")
    pts = _points(RL_CURVES[algo])
    steps, mean = [p["step"] for p in pts], [p["reward_mean"] for p in pts]
    window, color = smoothing_window(len(pts)), RL_COLORS.get(algo, "#444")
    fig = go.Figure()
    fig.add_scatter(x=steps, y=mean, mode="markers", marker={"size": 4, "color": color}, opacity=0.5, name="raw")
    fig.add_scatter(x=steps, y=moving_average(mean, window), mode="lines", line={"color": color, "width": 3},
                    name=f"{window}-step average")
    fig.update_layout(title={"text": f"{display_name(algo)}: RL reward per step", "font": {"size": 13}},
                      xaxis_title="RL step", yaxis_title="buyer reward", showlegend=False, height=320,
                      margin={"l": 10, "r": 10, "t": 50, "b": 40})
    fig.update_yaxes(automargin=True)
    return fig


def rl_phases() -> go.Figure:
    """Deal rate, first-offer ratio, turns, format errors, zero-spread groups per step: the four
    phases of the paper (anchoring, deadlock, concession, persuasion) show up in these."""
    keys = [k for k in RL_METRICS if k != "reward_mean"]
    fig = make_subplots(rows=2, cols=3, subplot_titles=[RL_METRICS[k] for k in keys] + ["overshoot rate"])
    found, seat = False, seat_buyer()
    for algo in rl_order(seat):
        pts = _points(RL_CURVES[algo])
        found |= bool(pts)
        steps, label = [p["step"] for p in pts], rl_label(algo)
        for i, k in enumerate([*keys, "overshoot_rate"]):
            fig.add_scatter(x=steps, y=[p.get(k) for p in pts], mode="lines+markers", name=label,
                            legendgroup=algo, showlegend=i == 0, row=i // 3 + 1, col=i % 3 + 1,
                            line={"color": RL_COLORS[algo], "width": _rl_width(algo, seat, 1.5)},
                            marker={"size": 4})
    if not found:
        return _empty("Behaviour over training", "no RL curve yet")
    fig.update_xaxes(title_text="RL step (episodes per step: see the legend)", title_font={"size": 11})
    fig.update_layout(title="Behaviour over training: six metrics per RL step (unsmoothed)", height=620,
                      legend=LEGEND_BELOW, margin={"b": 120})
    return fig


def log_ticks(values: list[float]) -> tuple[list[float], list[str]]:
    """Ticks 1, 2, 5 x 10^k spanning ``values``, labelled with their full value (not Plotly's bare
    leading digits), for a log axis."""
    import math  # noqa: PLC0415
    vals = [v for v in values if v and v > 0]
    if not vals:
        return [], []
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    ticks = [m * 10.0 ** e for e in range(lo, hi + 1) for m in (1, 2, 5) if min(vals) / 2 <= m * 10.0 ** e <= max(vals) * 2]
    return ticks, [f"{t:g}" for t in ticks]


DASHBOARD_PANELS = (  # (title, y-axis title) in reading order: SFT first, then RL
    ("1. SFT loss", "loss per buyer token (nats, log scale)"),
    ("2. SFT token accuracy", "share of buyer tokens predicted"),
    ("3. RL mean reward per step", "buyer reward (−1 to 1)"),
    ("4. RL deal rate", "share of episodes with a deal"),
    ("5. RL first offer", "first offer / budget"),
    ("6. RL turns per episode", "exchanges (of 6)"),
)


def dashboard() -> go.Figure:
    """Both stages on one figure: SFT loss and accuracy, then the RL reward, deal rate, first offer
    and turns per step (raw points and their moving average), every panel with its axis titles, and the
    expert's and the ceiling's test-split reward beside the RL reward."""
    fig = make_subplots(rows=2, cols=3, subplot_titles=[t for t, _ in DASHBOARD_PANELS],
                        horizontal_spacing=0.09, vertical_spacing=0.2)
    losses = []
    for label, name in SFT_CURVES.items():
        pts = _points(name)
        if not pts:
            continue
        steps, color = [p["step"] for p in pts], SFT_COLORS.get(label, "#444")
        losses += [p.get("loss") for p in pts]
        fig.add_scatter(x=steps, y=[p.get("loss") for p in pts], name=label, legendgroup=label, row=1, col=1,
                        line={"color": color})
        fig.add_scatter(x=steps, y=[p.get("mean_token_accuracy") for p in pts], name=label, legendgroup=label,
                        showlegend=False, row=1, col=2, line={"color": color})
    seat = seat_buyer()
    for algo in rl_order(seat):
        pts = _points(RL_CURVES[algo])
        steps = [p["step"] for p in pts]
        if not pts:
            continue
        window, label = smoothing_window(len(pts)), rl_label(algo)
        for i, key in enumerate(("reward_mean", "deal_rate", "first_offer_ratio", "turns_mean")):
            k = 3 + i
            raw = [p.get(key) for p in pts]
            where = {"row": (k - 1) // 3 + 1, "col": (k - 1) % 3 + 1}
            fig.add_scatter(x=steps, y=raw, name=f"{label} (raw)", legendgroup=algo, showlegend=i == 0, opacity=0.4,
                            line={"color": RL_COLORS[algo], "width": 1}, **where)
            fig.add_scatter(x=steps, y=moving_average(raw, window), name=f"{label} ({window}-step average)",
                            legendgroup=f"{algo}-avg", showlegend=i == 0,
                            line={"color": RL_COLORS[algo], "width": _rl_width(algo, seat, 3)}, **where)
    ticks, text = log_ticks([v for v in losses if v is not None])
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=text, row=1, col=1)
    for k, (_, ytitle) in enumerate(DASHBOARD_PANELS, start=1):
        row, col = (k - 1) // 3 + 1, (k - 1) % 3 + 1
        fig.update_yaxes(title_text=ytitle, title_font={"size": 11}, row=row, col=col)
        fig.update_xaxes(title_text="optimizer step" if k <= 2 else "RL step",
                         title_font={"size": 11}, row=row, col=col)
    if any(_points(n) for n in RL_CURVES.values()):
        reference_lines(fig, row=1, col=3)
    fig.update_layout(height=720, title="Training: SFT on expert games (1-2), then RL from the SFT model against the "
                                         "live environment (3-6; raw points and their moving average)",
                      legend={**LEGEND_BELOW, "y": -0.12}, margin={"b": 150})
    return fig


def pipeline_table() -> list[list]:
    data = read_artifact("pipeline.json") or {}
    return [[s["stage"], f"{s['wall_time_s']:.0f}", relative(s["command"])] for s in data.get("stages", [])]


# ---------------------------------------------------------------------- transcripts
def transcripts(name: str = "transcripts/eval_results.jsonl") -> list[dict]:
    path = artifact_path(name)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


BEFORE_AFTER = "before_after.json"


def before_after_games(name: str = BEFORE_AFTER) -> list[dict]:
    """The before-vs-after games (``training/before_after.py``) of artifact ``name``: one held-out game per entry,
    played by every training stage's buyer on the same scenario, seller and seed."""
    return (read_artifact(name) or {}).get("games", [])


BEFORE_AFTER_RULE = ("The game shown first is chosen by a rule, not by hand: among mutual-interest games, the one where "
                     "training changed the buyer's reward most (the largest |reward of the model in the model seat − "
                     "reward untrained|, the last stage's when the seat's model is not in the file; a tie goes to the "
                     "first in the file).")


def before_after_default(games: list[dict], buyers: list[str], seat: str | None = None) -> int:
    """The index of the game ``BEFORE_AFTER_RULE`` picks (0 when no game is of mutual interest): ``seat`` is the
    evaluation name of the model in the model seat."""
    if not games or len(buyers) < 2:
        return 0
    after = seat if seat in buyers[1:] else buyers[-1]
    change = [(abs(g["rewards"][after] - g["rewards"][buyers[0]]), -k) for k, g in enumerate(games)
              if g["interest"] == "mutual"]
    return -max(change)[1] if change else 0


def before_after_product(g: dict, name: str = BEFORE_AFTER) -> str:
    """The product on sale in game ``g``, as its buyers were told it (the listing: title, category, description
    and list price), with the private values each side had."""
    source = ((read_artifact(name) or {}).get("provenance", {}).get("config", {}) or {}).get("scenarios",
                                                                                                    "builtin")
    listing = f"### On sale: {g['title']}\n\n"  # the artifact's own fields, unless the catalog here has the listing
    try:
        from env.bargain.sources import get_split  # noqa: PLC0415
        s = get_split(source, "test")[g["product"]]
        if s.title == g["title"]:  # the same product (a changed catalog would show another one)
            listing = f"### On sale: {s.title} ({s.category})\n{s.description}\n\n"
    except Exception:  # noqa: BLE001, S110  (a source not present here)
        pass
    return (listing + f"List price ${g['list_price']:,.2f}; the buyer's budget ${g['budget']:,.2f}, the seller's cost "
            f"${g['cost']:,.2f} (private to each side). Below: what each buyer said about it.")


def before_after_label(g: dict) -> str:
    kind = "mutual interest" if g["interest"] == "mutual" else "conflicting interest: best possible reward 0"
    return f"{g['title']} · seller {g['seller']} · seed {g['seed']} · {kind}"


def before_after_summary(g: dict, buyers: list[str], name: str = BEFORE_AFTER) -> str:
    """Each buyer's reward on the game and its change from the first (untrained) one, with the ceiling."""
    first = g["rewards"][buyers[0]]
    sft = next((b for b in buyers if b == "sft" or b.endswith("_sft")), None)  # the start of RL, where there is one
    rl = [b for b in buyers[buyers.index(sft) + 1:]] if sft else []
    rows = [f"| {display_name(b)} | {g['rewards'][b]:+.3f} | "
            + (f"{g['rewards'][b] - first:+.3f} | " if b != buyers[0] else "| ")
            + (f"{g['rewards'][b] - g['rewards'][sft]:+.3f} | " if b in rl else "| ")
            + f"{g['games'][b]['metrics']['end_reason']}"
            + (f" at ${g['games'][b]['metrics']['price']:,.2f}" if g['games'][b]['metrics'].get('price') else "")
            + " |" for b in buyers]
    rl_head = f"the effect of RL (from {display_name(sft)})" if sft else "the effect of RL"
    return (f"**{before_after_label(g)}**: budget ${g['budget']:,.2f}, seller cost ${g['cost']:,.2f}, list price "
            f"${g['list_price']:,.2f}.\n\n| buyer | reward | change from {display_name(buyers[0])} | {rl_head} | ending |"
            "\n|---|---|---|---|---|\n"
            + "\n".join(rows)
            + f"\n| ceiling: the oracle, told the seller's floor | {g['oracle_reward']:+.3f} | | | |\n\n"
            + (f"{display_name(buyers[0])} scores −1 here (its replies cannot be read), so every change from it is "
               "large; the RL column compares like with like. " if first == -1 and rl else "")
            + f"Greedy play; from `artifacts/{name}` ({provenance_line(read_artifact(name), name)})")


def transcript_messages(t: dict) -> list[dict]:
    """A stored transcript as chat messages (as the Play tab shows them), then its ending."""
    from space.bargain import page_messages, turn_messages  # noqa: PLC0415
    out = page_messages(turn_messages(t["turns"]))
    m = t["metrics"]
    out.append({"role": "assistant", "content": f"*End: {m['end_reason']}"
                + (f" at ${m['price']:,.2f}" if m.get("price") is not None else "")
                + f"; buyer reward {m['reward']:+.3f}.*"})
    return out


# ---------------------------------------------------------------------- the GPU market
MARKET_EVAL = "eval_market.json"
MARKET_COLUMNS = ["policy", "task", "episodes", "reward", "95% CI", "std", "jobs completed", "deal rate",
                  "in a bought coalition", "pitch score", "invalid actions"]


MARKET_TASK_COLORS = {"single_trade": "#1f77b4", "market_round": "#ff7f0e", "coalition_market": "#2ca02c"}


def task_color(task: str) -> str:
    """One colour per market task in every plot (a task not listed gets a fixed fallback)."""
    return MARKET_TASK_COLORS.get(task, "#7f7f7f")


def market_rows(name: str = MARKET_EVAL) -> list[dict]:
    return (read_artifact(name) or {}).get("rows", [])


def market_bars(name: str = MARKET_EVAL) -> go.Figure:
    """Mean reward per policy, one group per task, with the 95% CI as whiskers."""
    rows = market_rows(name)
    if not rows:
        return _empty("GPU market: reward per policy", f"no rows in artifacts/{name} "
                                                       "(python training/evaluate.py --env market)")
    fig = go.Figure()
    for task in dict.fromkeys(r["task"] for r in rows):
        part = [r for r in rows if r["task"] == task]
        fig.add_bar(name=task, x=[display_name(r["policy"]) for r in part], y=[r["reward_mean"] for r in part],
                    marker_color=task_color(task), **_bar_text([r["reward_mean"] for r in part]),
                    customdata=[[r["episodes"], r["reward_ci95"][0], r["reward_ci95"][1]] for r in part],
                    hovertemplate="%{x}: %{y:+.3f} [%{customdata[1]:+.3f}, %{customdata[2]:+.3f}], "
                                  "%{customdata[0]} episodes",
                    error_y={"type": "data", "symmetric": False,
                             "array": [r["reward_ci95"][1] - r["reward_mean"] for r in part],
                             "arrayminus": [r["reward_mean"] - r["reward_ci95"][0] for r in part]})
    fig.update_layout(barmode="group", title=f"GPU market: mean reward of lab 0 per policy and task (95% CI) — {name}",
                      yaxis_title="reward = outcome / total job value", height=420)
    return fig


def _bar_text(values: list) -> dict:
    """Each bar's value printed beside it, so a bar of height 0 (a lab that never acts) is still seen."""
    return {"text": ["" if v is None else f"{v:+.3f}" for v in values], "textposition": "outside",
            "textfont": {"size": 10}, "cliponaxis": False}


def market_shocks(name: str = MARKET_EVAL) -> go.Figure:
    """Mean reward in the games each shock kind hit, per policy (tasks with shocks pooled per row)."""
    rows = [r for r in market_rows(name) if r.get("under_shocks")]
    if not rows:
        return _empty("GPU market: behaviour under shocks", f"no games with shocks in artifacts/{name}")
    kinds = sorted({k for r in rows for k in r["under_shocks"]})
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=[k.replace("_", " ") for k in kinds], shared_yaxes=True)
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    for task in tasks:
        part = [r for r in rows if r["task"] == task]
        for col, kind in enumerate(kinds, start=1):
            cells = [r["under_shocks"].get(kind) or {} for r in part]
            fig.add_bar(name=task, legendgroup=task, showlegend=col == 1, x=[display_name(r["policy"]) for r in part],
                        y=[c.get("reward_mean") for c in cells], marker_color=task_color(task),
                        customdata=[c.get("episodes") for c in cells],
                        hovertemplate="%{x}: %{y:+.3f} over %{customdata} games hit<extra>" + task + "</extra>",
                        row=1, col=col)
    fig.update_layout(barmode="group", title=f"GPU market: mean reward in the games each shock hit — {name}",
                      height=420)
    return fig


LAB_COLORS = ("#d62728", "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def market_rounds_chart(series: dict | None) -> go.Figure:
    """Each lab's money and GPU-hours after every round of one game (lab 0 in red in both panels)."""
    if not series:
        return _empty("Money and GPU-hours per round", "shown for a game played by agents, or once yours ends")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("money ($)", "GPU-hours held (blocks owned)"))
    for i, lab in enumerate(series["labs"]):
        color = LAB_COLORS[i % len(LAB_COLORS)]
        fig.add_scatter(x=series["rounds"], y=series["money"][i], name=lab, legendgroup=lab, mode="lines+markers",
                        line={"color": color}, row=1, col=1)
        fig.add_scatter(x=series["rounds"], y=series["hours"][i], name=lab, legendgroup=lab, showlegend=False,
                        mode="lines+markers", line={"color": color}, row=1, col=2)
    fig.update_xaxes(title_text="after round (0 = start)", dtick=1)
    fig.update_yaxes(title_text="dollars", row=1, col=1)
    fig.update_yaxes(title_text="GPU-hours", row=1, col=2)
    fig.update_layout(height=360, title="Each lab's money and GPU-hours, round by round")
    return fig


def market_same_seeds(name: str = MARKET_EVAL) -> dict[str, list[dict]]:
    """Per task, every model lab's row (a policy that is not scripted) followed by the scripted rows played on the
    same held-out seeds: the artifact's own rows where the model played as many seeds, else the ``same_seeds`` rows
    that came with it (``--include_rows``); models from different sources or seed counts each get their own scripted
    rows. Tasks without a model row are left out."""
    from env.market import POLICIES  # noqa: PLC0415

    data = read_artifact(name) or {}
    rows = data.get("rows", [])
    blocks = {b["from_artifact"]: b["rows"] for b in data.get("same_seeds", [])}
    source = lambda r: (r.get("from_artifact") if r.get("episodes_subset") else None, r["episodes"])  # noqa: E731
    out: dict[str, list[dict]] = {}
    for task in dict.fromkeys(r["task"] for r in rows):
        models = [r for r in rows if r["task"] == task and r["policy"] not in POLICIES]
        for key in dict.fromkeys(map(source, models)):
            scripted = blocks.get(key[0], []) if key[0] else rows
            out.setdefault(task, []).extend([*(m for m in models if source(m) == key),
                                             *(r for r in scripted if r["task"] == task and r["policy"] in POLICIES
                                               and r["episodes"] == key[1])])
    return out


def market_trained_bars(name: str = MARKET_EVAL) -> go.Figure:
    """One panel per task: the model labs (red: untrained to RL) beside every scripted policy on the same seeds, 95%
    CIs as whiskers."""
    from env.market import POLICIES  # noqa: PLC0415

    tasks = market_same_seeds(name)
    if not tasks:
        return _empty("GPU market: the trained lab vs the scripted policies",
                      f"no model lab rows in artifacts/{name} yet (python training/pipeline.py --env market "
                      "--model smollm2-135m --preset full)")
    fig = make_subplots(rows=1, cols=len(tasks), shared_yaxes=True,
                        subplot_titles=[t + (f" ({rows[0]['episodes']} seeds)" if len({r["episodes"] for r in rows}) == 1
                                                else "") for t, rows in tasks.items()])
    for col, (task, rows) in enumerate(tasks.items(), start=1):
        several = len({r["episodes"] for r in rows}) > 1  # rows on different seed counts: say which is which
        fig.add_bar(x=[f"{display_name(r['policy'])} ({r['episodes']} seeds)" if several else display_name(r["policy"])
                       for r in rows], y=[r["reward_mean"] for r in rows], showlegend=False,
                    **_bar_text([r["reward_mean"] for r in rows]),
                    marker_color=["#d62728" if r["policy"] not in POLICIES else "#7f7f7f" for r in rows],
                    customdata=[[r["episodes"], *r["reward_ci95"], r["invalid_rate"]] for r in rows],
                    hovertemplate="%{x}: %{y:+.3f} [%{customdata[1]:+.3f}, %{customdata[2]:+.3f}], %{customdata[0]} "
                                  "seeds, invalid actions %{customdata[3]:.1%}<extra>" + task + "</extra>",
                    error_y={"type": "data", "symmetric": False,
                             "array": [r["reward_ci95"][1] - r["reward_mean"] for r in rows],
                             "arrayminus": [r["reward_mean"] - r["reward_ci95"][0] for r in rows]},
                    row=1, col=col)
    fig.update_yaxes(title_text="lab 0 reward (95% CI)", row=1, col=1)
    fig.update_layout(title="The trained lab (red) vs every scripted policy (grey) on the same held-out seeds",
                      height=440)
    return fig


ACTIVITY = {"deals_mean": "deals", "pitches_mean": "pitches", "spot_hours_mean": "spot GPU-hours bought",
            "coalitions_joined_mean": "coalitions joined", "policy_counters_mean": "counter-offers"}


def market_lab_sentence(policy: str, name: str = MARKET_EVAL) -> str:
    """What the trained lab ``policy`` does and how it scores, in one sentence computed from the artifact: per task,
    its mean reward beside the expert's, the best baseline's (the best scripted policy other than the expert) and
    idle's on the same held-out seeds, and whether it acts at all."""
    from env.market import POLICIES  # noqa: PLC0415

    tasks = {t: rows for t, rows in market_same_seeds(name).items() if any(r["policy"] == policy for r in rows)}
    if not tasks:
        return f"No evaluation row of the trained lab (`{policy}`) in `artifacts/{name}` yet."
    mine = {t: next(r for r in rows if r["policy"] == policy) for t, rows in tasks.items()}
    # the scripted rows of the lab's own block (market_same_seeds: each block's models, then their scripted rows)
    own = {t: _scripted_after(rows, mine[t], POLICIES) for t, rows in tasks.items()}
    acts = {t: {k: r.get(k) or 0 for k in ACTIVITY} for t, r in mine.items()}
    idle_everywhere = all(not any(v for v in a.values()) and not mine[t].get("invalid_rate") for t, a in acts.items())
    if idle_everywhere:
        does = (f"The trained lab ({display_name(policy)}) waits at every move: no deal, pitch, spot purchase, "
                "coalition or counter-offer on any task, so it scores what doing nothing scores")
    else:
        per = "; ".join(f"{t}: " + (", ".join(f"{a[k]:.2g} {ACTIVITY[k]}" for k in ACTIVITY if a[k])
                               or ("no action that went through" if mine[t].get("invalid_rate") else "waits"))
                        + f", {mine[t].get('invalid_rate') or 0:.0%} of its actions refused" for t, a in acts.items())
        does = f"The trained lab ({display_name(policy)}) per game: {per}"
    parts = []
    for t in tasks:
        scripted = own[t]
        base = max((r for p, r in scripted.items() if p not in ("expert", "idle")), key=lambda r: r["reward_mean"],
                   default=None)
        ref = [f"expert {scripted['expert']['reward_mean']:+.3f}"] if "expert" in scripted else []
        ref += [f"best baseline {base['policy']} {base['reward_mean']:+.3f}"] if base else []
        ref += [f"idle {scripted['idle']['reward_mean']:+.3f}"] if "idle" in scripted else []
        parts.append(f"{t} {mine[t]['reward_mean']:+.3f} {ci_text(mine[t])} ({', '.join(ref)}; "
                     f"{mine[t]['episodes']} held-out seeds)")
    return does + ". Its reward: " + "; ".join(parts) + "."


def _scripted_after(rows: list[dict], model: dict, scripted: dict) -> dict[str, dict]:
    """The scripted rows that follow ``model``'s block in ``market_same_seeds`` order (its own seeds), by policy."""
    out, k = {}, rows.index(model) + 1
    while k < len(rows) and rows[k]["policy"] not in scripted:  # the block's other model rows
        k += 1
    while k < len(rows) and rows[k]["policy"] in scripted:
        out.setdefault(rows[k]["policy"], rows[k])
        k += 1
    return out


def market_trained_table(name: str = MARKET_EVAL) -> list[list]:
    """``market_same_seeds`` as table rows (the columns of ``MARKET_COLUMNS``)."""
    return [_market_row(r) for rows in market_same_seeds(name).values() for r in rows]


def _market_row(r: dict) -> list:
    lo, hi = r["reward_ci95"]
    return [display_name(r["policy"]), r["task"], r["episodes"], _f(r["reward_mean"]), f"[{lo:+.3f}, {hi:+.3f}]",
            _f(r["reward_std"], "{:.3f}"), _f(r["job_completion_rate"], "{:.1%}"), _f(r["deal_rate"], "{:.1%}"),
            _f(r["coalition_bought_rate"], "{:.1%}"), _f(r.get("pitch_score_mean"), "{:.2f}"),
            _f(r["invalid_rate"], "{:.1%}")]


def market_table(name: str = MARKET_EVAL) -> list[list]:
    return [_market_row(r) for r in market_rows(name)]
