"""How trained buyers generalise, each study reported separately (greedy, held-out test splits):

(a) ``a_other_source``: the other product source's test split (trained on builtin: the
    AmazonHistoryPrice test split, where ``../shared/data`` has it, and the reverse);
(b) ``b_held_out_seller``: the seller persona that no training stage saw (``--held_out_seller``);
(c) ``c_adversarial``: the adversarial personas (begging, insulting, unyielding), pooled in the
    ``mix`` row;
(d) ``d_llm_seller``: a frozen model seller (``--seller_model``; e.g. SmolLM2 taught the seller's
    side by SFT on scripted sellers' games), regulated by the environment like any seller.

Every study has the expert beside the trained buyers, and the oracle (told the seller's floor,
an upper bound) where the seller is scripted. A study that cannot run here (no Amazon data, no
seller model) is recorded with the reason, never left out silently.

    python training/generalisation.py --buyer_models grpo=runs/grpo/final --held_out_seller tit_for_tat
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from env.bargain.players import SELLERS
from env.bargain.sources import is_union, resolve_source, union_parts
from training.common.cli import parse
from training.common.provenance import RECORD_KEYS, provenance, relative, write_json
from training.engine.backends import SamplingConfig
from training.games.bargain import BargainGame
from training.games.bargain.config import BargainEvalArgs

ADVERSARIAL = ("begging", "insulting", "unyielding")


@dataclass
class GeneralisationConfig:
    buyer_models: str = field(default="", metadata={"help": "trained buyers: name=path,... (as in evaluate.py)"})
    train_source: str = field(default="builtin", metadata={"help": "the source the buyers trained on"})
    held_out_seller: str = field(default="tit_for_tat", metadata={"help": "the persona kept out of training"})
    seller_model: str = field(default="", metadata={"help": "a frozen model seller for study (d) ('' = not run)"})
    seeds: int = field(default=2, metadata={"help": "episodes per product per cell"})
    limit: int = field(default=0, metadata={"help": "first N test products of each split (0 = all)"})
    seller_model_limit: int = field(default=12, metadata={
        "help": "first N test products for study (d), where the model seller writes every seller turn (0 = as "
                "--limit; on a CPU a 135M seller takes several seconds per game)"})
    batch_size: int = field(default=64, metadata={"help": "episodes played in lockstep per batch (model players)"})
    out: str = field(default="artifacts/eval_generalisation.json", metadata={"help": "artifact path"})
    cell_cache: str = field(default="", metadata={
        "help": "a JSONL file keeping every finished model cell of every study: a rerun with the same settings "
                "and weights reads them back, so studies longer than a session resume ('' = none)"})
    include_rows: str = field(default="", metadata={
        "help": "comma list of earlier generalisation artifacts whose model buyers' rows join each study played "
                "here with the same options (checked; each row names its artifact): models studied once, beside "
                "fresh scripted rows. With it, --buyer_models may be empty"})

    def __post_init__(self):
        if self.held_out_seller not in SELLERS:
            raise ValueError(f"--held_out_seller must be one of {', '.join(SELLERS)}, got {self.held_out_seller!r}")
        if self.seller_model_limit < 0:
            raise ValueError(f"--seller_model_limit must be 0 or more, got {self.seller_model_limit}")
        if not self.buyer_models and not self.include_rows:
            raise ValueError("--buyer_models names the trained buyers to study (or --include_rows earlier studies)")


def _sources(train: str) -> list[str]:
    train = resolve_source(train)
    return union_parts(train) if is_union(train) else [train]


def _eval_source(trained: list[str]) -> str:
    """Where studies (b)-(d) play: the training source's test split (of a union, its first source that is
    not the generated training-only one: ``builtin+synthetic`` -> builtin)."""
    return next((s for s in trained if s != "synthetic"), "builtin")


def _other_source(trained: list[str]) -> str | None:
    """Study (a)'s source: one the buyers never trained on (builtin or amazon)."""
    if "amazon" not in trained:
        return "amazon" if resolve_source("auto") == "amazon" else None
    return "builtin" if "builtin" not in trained else None


def studies(cfg: GeneralisationConfig) -> dict[str, dict]:
    """Each study: what it asks, and the evaluate.py options that answer it (None: cannot run here)."""
    common = {"buyers": "expert", "buyer_models": cfg.buyer_models, "seeds": cfg.seeds, "limit": cfg.limit,
              "transcripts": "", "out": "", "progress": False, "temperatures": "0", "cell_cache": cfg.cell_cache,
              "batch_size": cfg.batch_size}
    trained = _sources(cfg.train_source)
    other, own = _other_source(trained), _eval_source(trained)
    return {
        "a_other_source": {
            "question": f"trained on {cfg.train_source}: the {other or 'other'} test split, every seller",
            "options": None if other is None else {**common, "scenarios": other},
            "why_not": None if other else "the other source's data is not on this machine" if "amazon" not in
            trained else "the buyers trained on every evaluation source"},
        "b_held_out_seller": {
            "question": f"the {cfg.held_out_seller} seller, never met in training",
            "options": {**common, "scenarios": own, "sellers": cfg.held_out_seller}},
        "c_adversarial": {
            "question": f"the adversarial sellers ({', '.join(ADVERSARIAL)}); the mix row pools them",
            "options": {**common, "scenarios": own, "sellers": ",".join(ADVERSARIAL)}},
        "d_llm_seller": {
            "question": "a frozen LLM seller, regulated by the environment" + (
                f" (the first {cfg.seller_model_limit} test products)" if cfg.seller_model_limit else ""),
            "options": None if not cfg.seller_model else {**common, "scenarios": own,
                                                          "limit": cfg.seller_model_limit or cfg.limit,
                                                          "seller_model": cfg.seller_model, "seller_name": "llm_seller"},
            "why_not": None if cfg.seller_model else "no --seller_model given (see the README for training one)"},
    }


# options that do not change a study's episodes: an included study must match on every other one
NOT_COMPARED = ("buyer_models", "progress", "cell_cache", "batch_size")  # greedy: a batch plays as its rows alone


def read_studies(path: str, plan: dict[str, dict]) -> dict:
    """An earlier generalisation artifact whose rows are to join this run's, checked against this run's
    ``plan`` before anything is played: every study it ran must run here with the same options."""
    try:
        other = json.loads(Path(path).read_text())
        theirs = other["studies"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"--include_rows: cannot read a generalisation artifact at {path}: {exc}") from None
    for name, study in theirs.items():
        if not study.get("ran"):
            continue
        mine = (plan.get(name) or {}).get("options")
        if mine is None:  # its rows would be dropped without a word
            why = (plan.get(name) or {}).get("why_not") or "this run has no such study"
            raise ValueError(f"--include_rows: {path} ran study {name}, which cannot run here ({why})")
        their = study.get("options") or {}
        differ = sorted(k for k in set(mine) | set(their) if k not in NOT_COMPARED and mine.get(k) != their.get(k))
        if differ:
            raise ValueError(f"--include_rows: {path} played study {name} with other options ({', '.join(differ)} "
                             "differ)")
    return other


def include_studies(path: str, other: dict, out: dict, included: dict) -> None:
    """Add to each study in ``out`` the model buyers' rows of the same study in ``other`` (read from
    ``path`` by ``read_studies``; buyers not already there). ``included`` gets the earlier run's record
    (command, commit, date) for the rows it played, and the records it kept for rows it had itself
    included, whose labels stay as they were."""
    label, taken, joined = relative(path), {}, set()
    for name, study in out.items():
        theirs = (other["studies"].get(name) or {}).get("rows", [])
        have = {r["buyer"] for r in study["rows"]}
        extra = [r if "from_artifact" in r else {**r, "from_artifact": label} for r in theirs
                 if r["buyer"] not in have and not r.get("upper_bound")]
        study["rows"].extend(extra)
        joined |= {r["from_artifact"] for r in extra}
        if native := sorted({r["buyer"] for r in extra if r["from_artifact"] == label}):
            taken[name] = native
    if not joined:
        raise ValueError(f"--include_rows: {path} has no model rows for the studies played here")
    if taken:
        prov = other.get("provenance", {})
        included[label] = {**{k: prov.get(k) for k in RECORD_KEYS},
                           "studies": taken}
    for earlier, record in other.get("included_rows", {}).items():
        if earlier in joined:
            included.setdefault(earlier, record)


def main(argv: list[str] | None = None) -> dict:
    (cfg, sampling), _ = parse(HfArgumentParser((GeneralisationConfig, SamplingConfig)),
                               list(sys.argv[1:] if argv is None else argv))
    start = time.perf_counter()
    plan = studies(cfg)
    paths = [x.strip() for x in cfg.include_rows.split(",") if x.strip()]
    earlier = {path: read_studies(path, plan) for path in paths}  # refused before hours of play, not after
    out = {}
    for name, study in plan.items():
        entry = {"question": study["question"]}
        if study["options"] is None:
            entry.update(ran=False, why_not=study["why_not"], rows=[])
        else:
            print(f"[generalisation] {name}: {study['question']}", file=sys.stderr, flush=True)
            art = BargainGame.evaluate(BargainEvalArgs(**study["options"]), sampling)
            entry.update(ran=True, options={k: v for k, v in study["options"].items() if k != "progress"},
                         rows=[{**r, "study": name} for r in art["rows"]])
            if art.get("cells_resumed"):
                entry["cells_resumed"] = art["cells_resumed"]
        out[name] = entry
    included: dict = {}
    for path, other in earlier.items():
        include_studies(path, other, out, included)
    rows = [r for s in out.values() for r in s["rows"]]
    artifact = {"provenance": provenance({**vars(cfg), "sampling": "greedy (temperature 0)"},
                                         {"rule": "as training/evaluate.py: base 1,000,000 + product * seeds + k"},
                                         time.perf_counter() - start),
                "studies": out, "rows": rows}
    if included:
        artifact["included_rows"] = included
    write_json(cfg.out, artifact)
    for name, s in out.items():
        mix = [r for r in s["rows"] if r["seller"] == "mix" or len({x["seller"] for x in s["rows"]}) == 1]
        shown = ", ".join(f"{r['buyer']} {r['reward_mean']:+.3f}" for r in mix) if s["ran"] else f"not run: {s['why_not']}"
        print(f"{name}: {shown}")
    print(f"wrote {cfg.out}")
    return artifact


if __name__ == "__main__":
    main()
