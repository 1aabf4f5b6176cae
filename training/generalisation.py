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

import sys
import time
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from env.bargain.players import SELLERS
from env.bargain.sources import is_union, resolve_source, union_parts
from training.common.cli import parse
from training.common.provenance import provenance, write_json
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
    out: str = field(default="artifacts/eval_generalisation.json", metadata={"help": "artifact path"})

    def __post_init__(self):
        if self.held_out_seller not in SELLERS:
            raise ValueError(f"--held_out_seller must be one of {', '.join(SELLERS)}, got {self.held_out_seller!r}")
        if self.seller_model_limit < 0:
            raise ValueError(f"--seller_model_limit must be 0 or more, got {self.seller_model_limit}")
        if not self.buyer_models:
            raise ValueError("--buyer_models names the trained buyers to study")


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
              "transcripts": "", "out": "", "progress": False, "temperatures": "0"}
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


def main(argv: list[str] | None = None) -> dict:
    (cfg, sampling), _ = parse(HfArgumentParser((GeneralisationConfig, SamplingConfig)),
                               list(sys.argv[1:] if argv is None else argv))
    start = time.perf_counter()
    out = {}
    for name, study in studies(cfg).items():
        entry = {"question": study["question"]}
        if study["options"] is None:
            entry.update(ran=False, why_not=study["why_not"], rows=[])
        else:
            print(f"[generalisation] {name}: {study['question']}", file=sys.stderr, flush=True)
            art = BargainGame.evaluate(BargainEvalArgs(**study["options"]), sampling)
            entry.update(ran=True, options={k: v for k, v in study["options"].items() if k != "progress"},
                         rows=[{**r, "study": name} for r in art["rows"]])
        out[name] = entry
    rows = [r for s in out.values() for r in s["rows"]]
    artifact = {"provenance": provenance({**vars(cfg), "sampling": "greedy (temperature 0)"},
                                         {"rule": "as training/evaluate.py: base 1,000,000 + product * seeds + k"},
                                         time.perf_counter() - start),
                "studies": out, "rows": rows}
    write_json(cfg.out, artifact)
    for name, s in out.items():
        mix = [r for r in s["rows"] if r["seller"] == "mix" or len({x["seller"] for x in s["rows"]}) == 1]
        shown = ", ".join(f"{r['buyer']} {r['reward_mean']:+.3f}" for r in mix) if s["ran"] else f"not run: {s['why_not']}"
        print(f"{name}: {shown}")
    print(f"wrote {cfg.out}")
    return artifact


if __name__ == "__main__":
    main()
