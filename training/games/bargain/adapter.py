"""The bilateral negotiation for the training scripts: train-split episodes against the seller
mix, the expert buyer's games for SFT, per-step statistics, and the buyer x seller evaluation."""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

from env.bargain.consistency import standing_prices
from env.bargain.env import EpisodeMetrics
from env.bargain.evaluation import episode_seed, format_table, mix_rows, play_cell, summarize_row, thought_consistency
from env.bargain.play import play_episode
from env.bargain.players import BUYERS, PROBES, SELLERS, make_player, parse_names
from env.bargain.players.oracle import ORACLE, OracleBuyer
from env.bargain.protocol import parse_reply
from env.bargain.rules import BUYER, SELLER
from env.bargain.sources import (
    PAPER_PRODUCTS,
    PAPER_TEST_PRODUCTS,
    ScenarioDataError,
    check_budget_factor,
    get_split,
    is_union,
    resolve_source,
    union_parts,
)
from training.common.provenance import RECORD_KEYS, provenance, relative, write_json, write_jsonl
from training.engine.backends import SamplingConfig
from training.games.bargain.config import BargainEvalArgs
from training.games.bargain.verdicts import GAMES_A_BATCH, flip_history, verdict_example, verdict_tokens
from training.games.base import build_agent


@dataclass(frozen=True)
class BargainEpisode:
    """One training episode: train product ``product`` (an index into the train split), ``seed``; ``handover``
    k > 0: the expert buyer writes the first k replies (not trained on) and the policy plays on from there;
    ``greedy_prefix``: the policy's own greedy game of the row writes the first replies (the handover is drawn when
    the row is played, from that game's length)."""

    product: int
    seed: int
    handover: int = 0
    greedy_prefix: bool = False


class ReplayBuyer:
    """A buyer that writes recorded replies in order (a game's prefix replayed as a teacher)."""

    name, role = "replay", BUYER

    def __init__(self, replies: tuple[str, ...]):
        self.replies, self.next = replies, 0

    def reset(self, obs, rng) -> None:
        self.next = 0

    def act(self, obs) -> str:
        if self.next >= len(self.replies):
            raise RuntimeError(f"the recorded game has {len(self.replies)} buyer replies; reply {self.next + 1} was asked")
        self.next += 1
        return self.replies[self.next - 1]


class GuidedReplay(ReplayBuyer):
    """Recorded replies, then the expert buyer's from the state they reached (off-policy guidance in a group)."""

    name = "replay+expert"

    def __init__(self, replies: tuple[str, ...], reasoning_mode: str = "option_a"):
        super().__init__(replies)
        self.expert = make_player(BUYER, "expert", reasoning_mode)

    def reset(self, obs, rng) -> None:
        super().reset(obs, rng)
        self.expert.reset(obs, rng)

    def act(self, obs) -> str:
        return super().act(obs) if self.next < len(self.replies) else self.expert.act(obs)


class BargainGame:
    """The buyer is trained; the seller is a persona of the mix (``seed mod len(sellers)``) or a
    frozen model."""

    name = "bargain"
    role = "buyer"
    hindsight = True  # SDPO's feedback is written for this game's buyer
    publishable = True  # --push_to_hub publishes this game's buyer
    refuses_actions = False  # an unreadable or illegal reply ends the episode at -1 (no --refusal_weight)
    checks_thoughts = True  # the buyer's Thoughts' ask/offer-vs-budget claims are checked (--consistency_weight)
    EvalArgs = BargainEvalArgs  # what training/evaluate.py parses for this game

    def __init__(self, script):
        self.script = script
        self.train = training_products(script.scenarios, script.budget_factor)

    @staticmethod
    def check_script(script) -> None:
        """What a training script's arguments must hold for this game (raises ValueError)."""
        check_budget_factor(script.budget_factor)
        script.seller_names = parse_names(script.sellers, SELLERS, "seller", PROBES)

    def defaults(self, cfg, default_curve: str, default_dir: str) -> None:
        """The bilateral game keeps the scripts' default curve and checkpoint folder."""

    # ------------------------------------------------------------------ training
    def rows(self, n: int) -> list[BargainEpisode]:
        """Row i plays train product ``i mod len(train)`` with seed i; with ``--expert_prefix`` a share of the rows
        start late in the expert's own game (``expert_handover``)."""
        rows = [BargainEpisode(i % len(self.train), i) for i in range(n)]
        share = getattr(self.script, "expert_prefix", 0.0)
        if share:
            rows = [replace(r, handover=self.expert_handover(r, share)) for r in rows]
        greedy = getattr(self.script, "greedy_prefix", 0.0)
        if greedy:  # drawn from the seed alone: the same rows start late whatever the policy
            rows = [replace(r, greedy_prefix=random.Random(f"greedy-prefix {r.seed}").random() < greedy) for r in rows]
        return rows

    def expert_handover(self, row: BargainEpisode, share: float) -> int:
        """Start states from demonstrations: with probability ``share`` (drawn from the row's seed) the row's game
        begins as the expert buyer plays it against the row's seller, and the policy takes over for the last
        ``--expert_prefix_replies`` buyer replies the expert made there (at least one reply stays the expert's),
        so that its episode is the late decisions alone: whether to take an ask within the budget before the
        rounds run out. Returns the number of replies the expert writes (0: the policy plays the whole game).
        The scripted seller answers the same moves the same way, so the prefix played in training is this one."""
        rng = random.Random(f"expert-prefix {row.seed}")
        if rng.random() >= share:
            return 0
        names = self.script.seller_names
        env = play_episode(self.train[row.product], make_player(BUYER, "expert"),
                           make_player(SELLER, names[row.seed % len(names)]), row.seed, self.script.max_turns)
        replies = sum(t["role"] == BUYER for t in env.log)
        last = max(1, replies - self.script.expert_prefix_replies)
        return rng.randint(last, replies - 1) if replies > 1 else 0

    def seed_rule(self, what: str = "rows") -> str:
        rule = (f"{what[:-1]} i: train product i mod {len(self.train)}, seed i; seller persona seed mod "
                f"{len(self.script.seller_names)}")
        share = getattr(self.script, "expert_prefix", 0.0)
        if share:
            rule += (f"; with probability {share} (drawn from the seed) the expert buyer plays the first replies "
                     f"and the policy the last {self.script.expert_prefix_replies} or fewer")
        greedy = getattr(self.script, "greedy_prefix", 0.0)
        if greedy:
            rule += (f"; with probability {greedy} (drawn from the seed) the policy's own greedy game of the row, played "
                     f"at the step, writes the first replies and the group samples the last "
                     f"{self.script.greedy_prefix_replies} or fewer (the handover drawn from the seed)")
            if getattr(self.script, "greedy_prefix_guide", 0):
                rule += (f"; in each such group {self.script.greedy_prefix_guide} episode(s) have the expert buyer play "
                         f"on from there instead, trained on")
        return rule

    def play(self, agent, episodes: list[BargainEpisode], opponent=None) -> list:
        """Whole episodes with ``agent`` as the buyer against the persona mix (or ``opponent``); a row with a
        ``handover`` has the expert write its first replies, a ``greedy_prefix`` row the policy's own greedy game
        (``greedy_handovers``). Each record's ``handover`` is the number of replies written for the policy."""
        from training.engine.rollout import Teacher  # noqa: PLC0415
        from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

        if opponent is not None and any(e.handover or e.greedy_prefix for e in episodes):
            raise ValueError("--expert_prefix and --greedy_prefix replay games against the scripted seller mix, "
                             "not a model seller")
        names = self.script.seller_names
        sellers = [opponent or names[e.seed % len(names)] for e in episodes]
        greedy = self.greedy_handovers(agent, [e for e in episodes if e.greedy_prefix])
        guides, seen = getattr(self.script, "greedy_prefix_guide", 0), {}
        buyers, handovers, guided = [], [], []
        for e in episodes:
            replies, k = greedy.get((e.product, e.seed), ((), e.handover))
            seen[e] = seen.get(e, 0) + 1
            guide = e.greedy_prefix and seen[e] <= guides  # the first of the row's copies: the expert plays on
            handovers.append(k)
            guided.append(guide)
            if guide:
                buyers.append(Teacher(partial(GuidedReplay, replies[:k], agent.reasoning_mode), agent, untrained=k))
            elif not k:
                buyers.append(agent)
            elif e.greedy_prefix:
                buyers.append(Teacher(partial(ReplayBuyer, replies), agent, handover=k))
            else:
                buyers.append(Teacher("expert", agent, handover=k))
        records = play_episodes([(self.train[e.product], e.seed) for e in episodes], buyers, sellers,
                                self.script.max_turns)
        for rec, k, g in zip(records, handovers, guided):
            rec.handover, rec.guided = k, g
        return records

    def greedy_handovers(self, agent, episodes: list[BargainEpisode]) -> dict:
        """Start states from the policy's own games: each distinct row of ``episodes`` is played once with
        ``agent`` decoding greedily (the replies it would be judged by), and its group then replays the first
        replies of that game (not trained on) and samples the rest: the last ``--greedy_prefix_replies`` or fewer of
        its replies (the handover drawn from the row's seed; 0 is the whole game). The
        scripted seller answers the same replies the same way, so every episode of the group starts in the state
        the greedy game reached. Returns ``(product, seed) -> (replies, handover)``; the greedy games' outcomes are
        kept in ``last_greedy`` for the step's statistics."""
        from training.engine.backends import greedy_decoding  # noqa: PLC0415
        from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

        self.last_greedy = []
        rows = list(dict.fromkeys((e.product, e.seed) for e in episodes))
        if not rows:
            return {}
        names = self.script.seller_names
        with greedy_decoding(agent.backend):
            played = play_episodes([(self.train[p], s) for p, s in rows], agent,
                                   [names[s % len(names)] for _, s in rows], self.script.max_turns)
        out = {}
        for (p, s), rec in zip(rows, played):
            replies = tuple(m["content"] for m in rec.messages if m["role"] == "assistant")
            last = max(0, len(replies) - self.script.greedy_prefix_replies)
            out[(p, s)] = (replies, random.Random(f"greedy-handover {s}").randint(last, max(last, len(replies) - 1)))
        self.last_greedy = played
        return out

    @staticmethod
    def step_stats(records) -> dict:
        """What a GRPO step logs beyond the reward spread (the paper's phases show in these)."""
        firsts = [r.metrics["first_offer_ratio"] for r in records if r.metrics["first_offer_ratio"] is not None]
        return {"deal_rate": statistics.fmean(r.metrics["deal"] for r in records),
                "first_offer_ratio": statistics.fmean(firsts) if firsts else None,
                "turns_mean": statistics.fmean(r.metrics["turns"] for r in records),
                "format_error_rate": statistics.fmean(r.metrics["format_errors"] > 0 for r in records),
                "overshoot_rate": statistics.fmean(r.metrics["overshoot"] for r in records),
                **thought_consistency([EpisodeMetrics(**r.metrics) for r in records])}

    def verdict_games(self, agent, games: int, chunk: int = GAMES_A_BATCH):
        """``games`` of the policy's own (``agent`` samples; rows as ``rows``, sellers as ``play``), played ``chunk``
        at a time (an engine that keeps each game's state in one of its slots holds a chunk), as verdict labels
        (``training/games/bargain/verdicts.py``): a dataset of ``input_ids``, ``completion_mask`` and ``verdicts`` (the
        labelled positions; ``verdict_over``: whether each one's true word is "over"), the verdicts'
        ``(true, false)`` counts as the policy wrote them, and the games' mean buyer reward."""
        from datasets import Dataset  # noqa: PLC0415
        from tqdm.auto import tqdm  # noqa: PLC0415

        rows, records = self.rows(games), []
        for i in tqdm(range(0, games, chunk), desc=f"own games ({chunk} a batch)", unit="batch"):
            records += self.play(agent, rows[i: i + chunk])
        examples = [verdict_example(rec, agent.tokenizer) for rec in records]
        ids, masks = [e.input_ids for e in examples], [e.completion_mask for e in examples]
        counts = (sum(e.true for e in examples), sum(e.false for e in examples))
        reward = statistics.fmean(r.reward for r in records)
        data = {"input_ids": ids, "completion_mask": masks, "verdicts": [e.verdicts for e in examples],
                "verdict_over": [e.over for e in examples]}
        return Dataset.from_dict(data), counts, reward

    def dagger_games(self, agent, games: int, chunk: int = GAMES_A_BATCH, symbols: bool = False):
        """DAgger's labels (Ross, Gordon and Bagnell, 2011): ``games`` of the policy's own (``agent`` samples, or
        decodes greedily at temperature 0; rows and sellers as ``verdict_games``), played ``chunk`` at a time, and at
        every state its buyer met there the reply the expert buyer writes from that state. For each reply k of a game
        the game is replayed up to k (the scripted seller answers the same replies the same way) and the expert writes
        reply k, which alone carries the loss. Behaviour cloning teaches the expert's moves in the expert's own games;
        these teach them where the policy's own play leads (a student that never accepts an ask sees the states
        where the expert accepts one). Returns the dataset (``input_ids``, ``completion_mask``; ``verdicts`` and
        ``verdict_over``: the expert's verdict words in each label, as ``verdict_games`` writes them, for
        ``--verdict_weight``; ``symbols``: with the signs of the digit comparison before each, as ``verdict_tokens``
        finds them) and a record of the labels (states, the expert's moves by kind, the share where the policy's own
        move was of the same kind, the weighted tokens by their verdict's word) and the own games' reward and deal
        rate."""
        from datasets import Dataset  # noqa: PLC0415
        from tqdm.auto import tqdm  # noqa: PLC0415

        from training.engine.rollout import Teacher  # noqa: PLC0415
        from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

        rows, records = self.rows(games), []
        for i in tqdm(range(0, games, chunk), desc=f"own games ({chunk} a batch)", unit="batch"):
            records += self.play(agent, rows[i: i + chunk])
        names = self.script.seller_names
        episodes, buyers, sellers, states = [], [], [], []  # states: (k, the policy's own move kind at k)
        for row, rec in zip(rows, records):
            replies = tuple(m["content"] for m in rec.messages if m["role"] == "assistant")
            for k, reply in enumerate(replies):
                episodes.append((self.train[row.product], row.seed))
                buyers.append(Teacher(partial(GuidedReplay, replies[:k], agent.reasoning_mode), agent, untrained=k))
                sellers.append(names[row.seed % len(names)])
                states.append((k, _move_kind(reply)))
        labelled = play_episodes(episodes, buyers, sellers, self.script.max_turns) if episodes else []
        ids, masks, positions, over, kinds, same = [], [], [], [], {}, 0
        for (k, mine), rec in zip(states, labelled):
            if len(rec.turns) <= k:
                continue  # the replay ended before state k (a seller that does not answer alike): no label
            label = rec.turns[k]
            ids.append(label.prompt_ids + label.completion_ids)
            masks.append([0] * len(label.prompt_ids) + list(label.mask))
            turns = rec.transcript["turns"]
            i, ask, own = standing_prices(turns)[k]  # the label is the replay's k-th buyer entry
            words = verdict_tokens(label, turns[i]["thought"], ask, rec.transcript["scenario"]["budget"], own,
                                   agent.tokenizer, symbols=symbols)
            positions.append([len(label.prompt_ids) + j for j, _, _, _ in words])
            over.append([want == "over" for _, _, want, _ in words])
            kind = _move_kind(label.text)
            kinds[kind] = kinds.get(kind, 0) + 1
            same += kind == mine
        record = {"own_games": len(records), "states": len(ids), "expert_moves": dict(sorted(kinds.items())),
                  "own_move_agrees": same / len(ids) if ids else None,
                  "own_reward_mean": statistics.fmean(r.reward for r in records) if records else None,
                  "own_deal_rate": statistics.fmean(r.metrics["deal"] for r in records) if records else None,
                  "verdicts": {"over": sum(map(sum, over)), "within": sum(len(o) - sum(o) for o in over)}}
        data = {"input_ids": ids, "completion_mask": masks, "verdicts": positions, "verdict_over": over}
        return Dataset.from_dict(data), record

    def expert_verdict_games(self, agent, games: int, products=None, seed: int = 0):
        """The comparison drill in whole games: ``games`` of the expert buyer, written in ``agent``'s conversation
        format, against the seller cycle (game ``i``: product ``i mod len(products)``, seed ``seed + i``, seller
        ``i mod len(sellers)``; ``products``: the train split unless given), as streams whose loss falls on the
        verdict words of the buyer's Thoughts alone (``completion_mask`` 1 there, ``verdicts``/``verdict_over`` as
        ``verdict_games`` writes them). Each verdict is read with the game's history before it: the earlier asks and
        the earlier Thoughts' verdicts, most of them "over" until an ask comes within the budget. Returns the
        dataset and the ``(over, within)`` counts of its true words (``flip_streams`` makes their histories lie)."""
        from datasets import Dataset  # noqa: PLC0415

        from training.engine.rollout import Teacher  # noqa: PLC0415
        from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

        products = self.train if products is None else products
        names = self.script.seller_names
        episodes = [(products[i % len(products)], seed + i) for i in range(games)]
        records = play_episodes(episodes, Teacher("expert", agent), [names[i % len(names)] for i in range(games)],
                                self.script.max_turns)
        data = {"input_ids": [], "completion_mask": [], "verdicts": [], "verdict_over": []}
        for rec in records:
            ex = verdict_example(rec, agent.tokenizer)
            if not ex.verdicts:  # a game the expert closed before any ask (nothing to drill)
                continue
            _add_stream(data, ex.input_ids, ex.verdicts, ex.over)
        words = [o for row in data["verdict_over"] for o in row]
        return Dataset.from_dict(data), (sum(words), len(words) - sum(words))

    @staticmethod
    def flip_streams(streams, tokenizer, share: float, seed: int):
        """``expert_verdict_games``' streams with histories that lie: each verdict turns to the wrong word with
        probability ``share`` and leaves the loss (``flip_history``, drawn from ``random.Random(seed)`` in row
        order), so a later verdict cannot be copied from the earlier ones; a stream left with no verdict is dropped.
        Returns the dataset and the ``(over, within, flipped)`` counts of its trained words and turned ones."""
        import random  # noqa: PLC0415

        from datasets import Dataset  # noqa: PLC0415

        data = {"input_ids": [], "completion_mask": [], "verdicts": [], "verdict_over": []}
        rng, flipped = random.Random(seed), 0
        for ids, positions, over in zip(streams["input_ids"], streams["verdicts"], streams["verdict_over"]):
            ids, positions, over, turned = flip_history(ids, positions, over, tokenizer, rng, share)
            flipped += turned
            if positions:
                _add_stream(data, ids, positions, over)
        words = [o for row in data["verdict_over"] for o in row]
        return Dataset.from_dict(data), (sum(words), len(words) - sum(words), flipped)

    def expert_games(self, agents, games: int, role: str = "buyer"):
        """Expert games as token streams: ``input_ids`` and ``completion_mask`` (1 on the trained
        role's tokens). Game ``i`` is train product ``i mod len(train)`` with seed ``i`` against seller
        ``i mod len(sellers)``; with several agents (one per reasoning format) successive rounds of
        the seller cycle alternate formats. ``role="seller"``: the model learns the seller of game
        ``i`` (persona ``i mod len(sellers)``) against scripted buyer ``(i div len(sellers)) mod
        len(BUYERS)``; the records carry the seller's reward. The buyer is the script's ``teacher``
        (``sft.py --teacher``), the expert unless it names another."""
        from datasets import Dataset  # noqa: PLC0415

        from training.engine.rollout import Teacher  # noqa: PLC0415
        from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

        sellers, scenarios = self.script.seller_names, self.train
        buyers = list(BUYERS)
        ids, masks, rewards = [], [], []
        for j, seller in enumerate(sellers):
            for k, agent in enumerate(agents):
                games_jk = [i for i in range(j, games, len(sellers)) if (i // len(sellers)) % len(agents) == k]
                episodes = [(scenarios[i % len(scenarios)], i) for i in games_jk]
                if role == "seller":
                    records = play_episodes(episodes, [buyers[(i // len(sellers)) % len(buyers)] for i in games_jk],
                                            Teacher(seller, agent), self.script.max_turns, trained_role="seller")
                else:
                    records = play_episodes(episodes, Teacher(self.teacher_name(), agent), seller,
                                            self.script.max_turns)
                for rec in records:
                    ids.append(rec.prompt_ids + rec.completion_ids)
                    masks.append([0] * len(rec.prompt_ids) + rec.env_mask)
                    rewards.append(rec.reward)
        return Dataset.from_dict({"input_ids": ids, "completion_mask": masks}), rewards

    def teacher_name(self) -> str:
        """The scripted buyer whose games ``expert_games`` writes (``sft.py --teacher``; the expert by default)."""
        return getattr(self.script, "teacher", "expert")

    def expert_seed_rule(self, agents: int) -> str:
        n, teacher = len(self.script.seller_names), self.teacher_name()
        seller_role = getattr(self.script, "role", "") == "seller"
        return (f"game i: train product i mod {len(self.train)}, seed i, seller i mod {n}"
                + (f", scripted buyer (i div {n}) mod {len(BUYERS)}" if seller_role
                   else f", buyer {teacher}" if teacher != "expert" else "")
                + (f", format (i div {n}) mod {agents}" if agents > 1 else ""))

    # ------------------------------------------------------------------ evaluation
    @staticmethod
    def evaluate(config, sampling: SamplingConfig, command: str | None = None) -> dict:
        """Every buyer x seller cell on the split's products x seeds, plus a ``mix`` row per buyer."""
        from tqdm.auto import tqdm  # noqa: PLC0415

        start = time.perf_counter()
        buyer_agents = {name: build_agent(path, config, sampling, config.model_modes.get(name, ""))
                        for name, path in config.model_buyers.items()}
        modes = {b: config.model_modes.get(b, config.reasoning_mode) for b in config.buyer_names}
        seller_agent = build_agent(config.seller_model, config, sampling) if config.seller_model else None
        dataset = resolve_source(config.scenarios)
        scenarios = get_split(dataset, config.split, config.budget_factor)
        if not scenarios:
            total = len(get_split(dataset, "all", config.budget_factor))
            raise ScenarioDataError(f"{config.scenarios}: its {config.split} split holds no products ({total} in all; "
                                    f"the test split holds out {PAPER_TEST_PRODUCTS} of every {PAPER_PRODUCTS}, none "
                                    "of a single product): use --split all")
        if config.limit:
            scenarios = scenarios[: config.limit]
        rows, transcripts = [], []
        oracle = config.oracle and seller_agent is None  # the ceiling is known only for scripted sellers
        names = config.buyer_names + ([ORACLE] if oracle else [])
        modes[ORACLE] = config.reasoning_mode
        temps = config.temperature_list or [sampling.temperature]
        unknown = set(config.greedy_names) - set(buyer_agents)
        if unknown:
            raise ValueError(f"--greedy_only names buyers that are not model buyers: {', '.join(sorted(unknown))}")
        temps_of = {b: temps[:1] if b in config.greedy_names else temps for b in names}
        total = sum(len(temps_of[b]) if b in buyer_agents or seller_agent else 1 for b in names) * \
            len(config.seller_names) * len(scenarios)
        cache = _cell_cache(config, sampling, dataset, scenarios)
        groups: dict[tuple[str, float | None], dict] = {}  # (buyer, temperature) -> its cells, for the mix rows
        with tqdm(total=total, desc="evaluate", unit="product", disable=not config.progress, file=sys.stderr) as bar:
            for b in names:
                model = b in buyer_agents or seller_agent is not None
                for t in temps_of[b] if model else [None]:
                    labels = {} if t is None else {"temperature": t, "sampling": sampling_label(t)}
                    for agent in filter(None, (buyer_agents.get(b), seller_agent)) if model else ():
                        agent.sampling = agent.backend.sampling = replace(sampling, temperature=t)
                    for s in config.seller_names:
                        if model:
                            cell = _cell(config, b, s, t, modes[b])
                            if cache is not None and (hit := _cached_cell(cache, cell)) is not None:
                                metrics, kept = hit
                                bar.update(len(scenarios))
                            else:
                                metrics, kept = _model_cell(scenarios, buyer_agents.get(b, b), seller_agent or s,
                                                            config, on_product=lambda: bar.update(1))
                                if cache is not None:
                                    cache.put(cell, {"metrics": [m.to_dict() for m in metrics], "transcripts": kept})
                        else:
                            metrics, kept = play_cell(
                                scenarios, (lambda: OracleBuyer(config.reasoning_mode)) if b == ORACLE
                                else (lambda: make_player("buyer", b, config.reasoning_mode)),
                                lambda: make_player("seller", s, config.reasoning_mode), config.seeds,
                                config.max_turns, config.seed_base, config.transcripts_per_cell,
                                on_product=lambda: bar.update(1))
                        groups.setdefault((b, t), {})[(b, s)] = metrics
                        rows.append(summarize_row(metrics, buyer=b, seller=s, split=config.split, dataset=dataset,
                                                  reasoning_mode=modes[b], **labels))
                        transcripts.extend({"buyer": b, "seller": s, **labels, **t_} for t_ in kept)
        if len(config.seller_names) > 1:
            for (b, t), cells in groups.items():
                labels = {} if t is None else {"temperature": t, "sampling": sampling_label(t)}
                rows.extend({**r, "reasoning_mode": modes[b], **labels} for r in mix_rows(cells, config.split, dataset))
        for r in rows:  # the oracle is told the seller's floor: a ceiling to read the others against
            if r["buyer"] == ORACLE:
                r["upper_bound"] = True
        others = []
        if len(temps) > 1:  # the first temperature is the headline; the others are kept beside it
            others = [r for r in rows if r.get("temperature") not in (None, temps[0])]
            rows = [r for r in rows if r.get("temperature") in (None, temps[0])]
        cfg = {k: v for k, v in asdict(config).items() if k not in ("progress", "env")}
        if buyer_agents or seller_agent:
            cfg["sampling"] = asdict(sampling)
        cfg["dataset"] = dataset
        cfg["products"] = len(scenarios)
        seeds = {"base": config.seed_base, "per_product": config.seeds,
                 "rule": "seed = base + product_index * per_product + k"}
        included = {}
        for path in (x.strip() for x in config.include_rows.split(",") if x.strip()):
            extra, extra_others, source, carried = _included_rows(path, cfg, config, dataset, len(scenarios),
                                                                  {r["buyer"] for r in rows})
            rows.extend(extra)
            others.extend(extra_others)
            if source is not None:
                included[relative(path)] = source
            for earlier, record in carried.items():
                included.setdefault(earlier, record)
        artifact = {"provenance": provenance(cfg, seeds, time.perf_counter() - start, command), "rows": rows}
        if included:
            artifact["included_rows"] = included
        if cache is not None and cache.resumed:  # played by an earlier, interrupted run of this evaluation
            artifact["cells_resumed"] = cache.resumed
        if buyer_agents or seller_agent:
            artifact["sampling"] = {"headline": sampling_label(temps[0]), "others": [sampling_label(t) for t in temps[1:]],
                                    "why": SAMPLING_WHY["greedy" if temps[0] == 0 else "sampled"]}
        elif samplings := [x["sampling"] for x in included.values() if x["sampling"]]:
            # the model rows here are all included ones: their headline sampling, which must be one
            if len({x["headline"] for x in samplings}) > 1:  # rows at different samplings do not compare
                raise ValueError("--include_rows: the artifacts' model rows were played at different headline "
                                 "samplings: " + ", ".join(sorted({x["headline"] for x in samplings})))
            artifact["sampling"] = {**samplings[0], "others": sorted({o for x in samplings for o in x["others"]})}
        if others:
            artifact["rows_other_sampling"] = others
        if (checks := target_checks(rows)) is not None:
            artifact["targets"] = checks
        if config.out:
            write_json(config.out, artifact)
        if config.transcripts and transcripts:
            write_jsonl(config.transcripts, transcripts)
        return artifact

    @staticmethod
    def table(artifact: dict) -> str:
        rows = artifact["rows"]
        text = format_table(rows)
        mix = [r for r in rows if r["seller"] == "mix" and not r.get("upper_bound") and r["reward_mean"] is not None]
        if mix:
            best = max(mix, key=lambda r: r["reward_mean"])
            text += f"\n\nbest buyer against the seller mix: {best['buyer']} ({best['reward_mean']:+.3f})"
        ceiling = next((r for r in rows if r["seller"] == "mix" and r.get("upper_bound")), None)
        if ceiling:
            text += f"\nceiling (the oracle, told each seller's floor): {ceiling['reward_mean']:+.3f}"
        if "sampling" in artifact:
            text += f"\nmodel players above: {artifact['sampling']['headline']}"
        for label in artifact.get("sampling", {}).get("others", []):
            text += f"\n\nmodel players at {label}:\n" + format_table(
                r for r in artifact.get("rows_other_sampling", []) if r["sampling"] == label)
        return text


INCLUDE_MUST_MATCH = ("split", "seeds", "seed_base", "max_turns", "budget_factor", "reasoning_mode")


def training_products(source: str, budget_factor: float, split: str = "train") -> list:
    """The train split a script's rows index (``split``: another split of the same sources, e.g. the test products
    a drill's held-out examples take). For a union (``builtin+synthetic``) the sources take
    turns, each cycled to the length of the largest, so every source gets an equal share of any run's
    games whatever its size (row i of a two-source union: source i mod 2)."""
    resolved = resolve_source(source)
    if not is_union(resolved):
        return get_split(resolved, split, budget_factor)
    parts = [get_split(part, split, budget_factor) for part in union_parts(resolved)]
    if not all(parts):
        raise ValueError(f"--scenarios {source}: a source of the union has no {split} products")
    longest = max(len(p) for p in parts)
    return [part[k % len(part)] for k in range(longest) for part in parts]


def _included_rows(path: str, cfg: dict, config, dataset: str, products: int,
                   taken: set) -> tuple[list, list, dict, dict]:
    """The model buyers' rows of an earlier artifact played on the same episodes as this run, or on
    its first products' episodes (the seed rule makes those identical; such rows say so): its headline
    rows, its rows at other samplings, its record (command, commit, date...), and the records of the
    artifacts it had itself included rows from, for the rows that come along."""
    try:
        other = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--include_rows: cannot read {path}: {exc}") from None
    prov = other.get("provenance", {})
    theirs = prov.get("config", {})
    differ = [k for k in INCLUDE_MUST_MATCH if theirs.get(k) != cfg.get(k)]
    if theirs.get("dataset") != dataset or not 0 < (theirs.get("products") or 0) <= products:
        differ.append("dataset/products")  # the same products, or the first ones of them
    rows = [r for r in other.get("rows", []) if r["buyer"] not in taken and not r.get("upper_bound")]
    buyers = {r["buyer"] for r in rows}
    others = [r for r in other.get("rows_other_sampling", []) if r["buyer"] in buyers]  # e.g. their T=0.7 rows
    sellers = {r["seller"] for r in rows if r["seller"] != "mix"}
    if sellers != set(config.seller_names):
        differ.append("sellers")
    if differ:
        raise ValueError(f"--include_rows: {path} was not played on the same episodes ({', '.join(differ)} differ)")
    if not buyers:
        raise ValueError(f"--include_rows: {path} has no rows for buyers not already in this evaluation")
    keep = {k: prov.get(k) for k in RECORD_KEYS}
    label = {"from_artifact": relative(path)}
    if theirs["products"] < products:  # same seed rule, so these are exactly the first products' episodes
        label["episodes_subset"] = (f"the first {theirs['products']} of these {products} test products, "
                                    f"{theirs['seeds']} seeds each")
    # a row the earlier artifact had itself included keeps its own label, and its source's record comes along;
    # the earlier artifact's record is kept for the rows it played itself (none, when it only gathered rows)
    native = {r["buyer"] for r in rows if "from_artifact" not in r}
    rows, others = ([r if "from_artifact" in r else {**r, **label} for r in part] for part in (rows, others))
    carried = {p: src for p, src in other.get("included_rows", {}).items()
               if any(r.get("from_artifact") == p for r in rows)}
    source = {**keep, "buyers": sorted(native), "products": theirs["products"],
              "sampling": other.get("sampling")} if native else None
    return rows, others, source, carried


# what a model cell's episodes do not depend on (the other players, the outputs): left out of its key
NOT_IN_CELL_KEY = ("out", "transcripts", "progress", "buyers", "buyer_models", "buyer_model", "buyer_name",
                   "buyer_modes", "sellers", "seller_name", "temperatures", "greedy_only", "include_rows", "oracle",
                   "cell_cache", "limit", "scenarios")


def _cell_cache(config, sampling: SamplingConfig, dataset: str, scenarios: list):
    """The evaluation's ``CellCache`` (None without ``--cell_cache``), keyed by the settings every model
    cell shares: the products themselves (not the option that named them), seeds, turns, sampling."""
    if not config.cell_cache:
        return None
    import torch  # noqa: PLC0415

    from training.common.cells import CellCache  # noqa: PLC0415

    settings = {k: v for k, v in asdict(config).items() if k not in NOT_IN_CELL_KEY}
    settings.update(dataset=dataset, products=[asdict(sc) for sc in scenarios],
                    sampling={k: v for k, v in asdict(sampling).items() if k != "temperature"},
                    device=config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return CellCache(config.cell_cache, settings)


def _cached_cell(cache, cell: dict) -> tuple[list[EpisodeMetrics], list[dict]] | None:
    """A finished cell's episodes and kept transcripts (None: never finished, or stored in another shape)."""
    data = cache.get(cell)
    try:
        return None if data is None else ([EpisodeMetrics(**m) for m in data["metrics"]], data["transcripts"])
    except (TypeError, KeyError):  # written when the metrics had other fields: played again
        return None


def _cell(config, buyer: str, seller: str, temperature: float | None, mode: str) -> dict:
    """A model cell's identity: each player by name, and a model player also by path and weights."""
    from training.common.cells import model_fingerprint  # noqa: PLC0415

    cell = {"buyer": buyer, "seller": seller, "temperature": temperature, "reasoning_mode": mode}
    for side, path in (("buyer", config.model_buyers.get(buyer)), ("seller", config.seller_model or None)):
        if path:  # by its files, not where they are: a checkout elsewhere reads the same cells
            cell[f"{side}_model"] = model_fingerprint(path)
    return cell


def _model_cell(scenarios, buyer, seller, config, on_product) -> tuple[list[EpisodeMetrics], list[dict]]:
    """A cell with a model player: the same (product, seed) episodes, through the rollout engine."""
    from training.games.bargain.rollout import play_episodes  # noqa: PLC0415

    episodes = [(sc, episode_seed(i, k, config.seeds, config.seed_base))
                for i, sc in enumerate(scenarios) for k in range(config.seeds)]
    for player in (buyer, seller):  # a sampled cell draws the same whatever cells ran before it (or were resumed)
        if hasattr(getattr(player, "backend", None), "calls"):
            player.backend.calls = 0
    metrics, kept = [], []
    for start in range(0, len(episodes), config.batch_size):
        batch = episodes[start: start + config.batch_size]
        done = 0

        def tick(_i):
            nonlocal done
            done += 1
            if done % config.seeds == 0:
                on_product()
        records = play_episodes(batch, buyer, seller, config.max_turns, on_done=tick)
        metrics += [EpisodeMetrics(**r.metrics) for r in records]
        kept += [r.transcript for r in records][: max(0, config.transcripts_per_cell - len(kept))]
    return metrics, kept


SAMPLING_WHY = {
    "greedy": "greedy decoding is the policy's own best move: deterministic, so every row replays from its seeds, "
              "and what the Space's model seat plays; sampled rows (as in GRPO's rollouts) are kept beside it",
    "sampled": "sampling at this temperature is how the policy played during RL; greedy rows are kept beside it",
}


def sampling_label(temperature: float) -> str:
    return "greedy" if temperature == 0 else f"T={temperature:g}"


SCRIPTED_BASELINES = ("always_accept", "split_difference", "lowballer", "offer_budget", "random_valid")


def target_checks(rows: list[dict]) -> dict | None:
    """The training issues' targets, checked on the seller-mix rows: SFT format errors under 2%;
    GRPO above SFT beyond both 95% CIs; GRPO above every scripted baseline except the expert; a
    trained buyer above the expert (stretch); overshoot rates (these need sft and grpo rows); and
    the headline trained buyer's (``headline_checks``). None without a trained buyer."""
    mix = {r["buyer"]: r for r in rows if r["seller"] == "mix"}
    if "sft" not in mix or "grpo" not in mix:
        return headline_checks(rows)
    sft, grpo = mix["sft"], mix["grpo"]
    trained = [b for b in ("sft", "grpo", "sdpo") if b in mix]
    below = [b for b in SCRIPTED_BASELINES if b in mix and grpo["reward_mean"] <= mix[b]["reward_mean"]]
    best_trained = max(trained, key=lambda b: mix[b]["reward_mean"])
    return {
        "sft_format_error_rate_below_2pct": {"met": sft["format_error_rate"] < 0.02,
                                             "value": sft["format_error_rate"]},
        "grpo_above_sft_beyond_ci": {"met": grpo["reward_ci95"][0] > sft["reward_ci95"][1],
                                     "grpo": grpo["reward_mean"], "sft": sft["reward_mean"]},
        "grpo_above_every_baseline_but_expert": {"met": not below, "grpo": grpo["reward_mean"],
                                                 "baselines_not_beaten": {b: mix[b]["reward_mean"] for b in below}},
        "trained_above_expert (stretch)": {"met": "expert" in mix and mix[best_trained]["reward_mean"]
                                           > mix["expert"]["reward_mean"], "best_trained": best_trained,
                                           "value": mix[best_trained]["reward_mean"],
                                           "expert": mix.get("expert", {}).get("reward_mean")},
        "overshoot_rate": {b: mix[b]["overshoot_rate"] for b in trained},
        **(headline_checks(rows) or {}),
    }


def headline_checks(rows: list[dict]) -> dict | None:
    """The headline trained buyer's targets on the seller-mix rows: the trained buyer with the best
    mean among those played on every episode (rows of a subset of the products, the untrained bases
    and the oracle's ceiling are not candidates), above every scripted baseline beyond both 95% CIs
    (its CI's low end above the baseline's high end), at or above the expert (the gap either way),
    and format errors and overshoot each under 2%. None without such a buyer."""
    from env.bargain.players import BUYERS  # noqa: PLC0415

    mix = {r["buyer"]: r for r in rows if r["seller"] == "mix"}
    full = max((r.get("episodes", 0) for r in mix.values()), default=0)
    trained = {b: r for b, r in mix.items() if b not in BUYERS and not r.get("upper_bound") and b != "base"
               and not b.endswith("_base") and not r.get("episodes_subset") and r.get("episodes", 0) == full}
    if not trained:
        return None
    best = max(trained, key=lambda b: trained[b]["reward_mean"])
    h = trained[best]
    baselines = {b: mix[b] for b in SCRIPTED_BASELINES if b in mix}
    not_beaten = {b: r["reward_mean"] for b, r in baselines.items() if not h["reward_ci95"][0] > r["reward_ci95"][1]}
    expert = mix.get("expert", {}).get("reward_mean")
    return {
        "headline_above_every_baseline_beyond_ci": {"met": bool(baselines) and not not_beaten, "headline": best,
                                                    "value": h["reward_mean"], "ci95": h["reward_ci95"],
                                                    "baselines_not_beaten": not_beaten},
        "headline_at_or_above_expert": {"met": expert is not None and h["reward_mean"] >= expert, "headline": best,
                                        "value": h["reward_mean"], "expert": expert,
                                        "gap": None if expert is None else h["reward_mean"] - expert},
        "headline_format_errors_below_2pct": {"met": h["format_error_rate"] < 0.02, "value": h["format_error_rate"]},
        "headline_overshoot_below_2pct": {"met": h["overshoot_rate"] < 0.02, "value": h["overshoot_rate"]},
    }


def _move_kind(reply: str) -> str | None:
    """The kind of move a buyer reply makes (BUY, DEAL, ...), None for one the protocol cannot read."""
    action = parse_reply(reply).action
    return action.kind if action else None


def _add_stream(data: dict, ids: list[int], positions: list[int], over: list[bool]) -> None:
    """One verdict stream into ``data``: its tokens, the loss on its ``positions`` alone, and their words."""
    mask = [0] * len(ids)
    for at in positions:
        mask[at] = 1
    data["input_ids"].append(ids)
    data["completion_mask"].append(mask)
    data["verdicts"].append(positions)
    data["verdict_over"].append(over)
