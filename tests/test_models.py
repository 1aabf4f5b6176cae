"""The tiny offline model: tokenizer, chat template, architecture, save/load."""

from __future__ import annotations

from transformers import AutoModelForCausalLM, AutoTokenizer

from training.engine.models import MARKERS, build_tokenizer, qwen3_chat_template


def test_tokenizer_splits_digits_and_keeps_markers_whole(tiny):
    _, tok = tiny
    pieces = tok.convert_ids_to_tokens(tok("Action: [BUY] $1,299.99", add_special_tokens=False)["input_ids"])
    assert "[BUY]" in pieces and "Action:" in pieces
    digits = [p for p in pieces if any(ch.isdigit() for ch in p)]
    assert digits == ["1", "2", "9", "9", "9", "9"], "every digit is its own token"
    for marker in MARKERS + ["<|im_start|>", "<|im_end|>"]:
        assert len(tok(marker, add_special_tokens=False)["input_ids"]) == 1, marker


def test_chat_template_is_trls_qwen3_unchanged(tiny):
    _, tok = tiny
    assert tok.chat_template == qwen3_chat_template()
    text = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                   tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_any_text_round_trips(tiny):
    _, tok = tiny
    for text in ["Talk: é 中文 🙂 [DEAL] $5", "<think>x</think>\nTalk: y\nAction: [QUIT]", "\x00\x01 weird"]:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_model_is_small_qwen3_and_reloads(tiny, tiny_dir):
    model, tok = tiny
    assert model.config.model_type == "qwen3"
    n = sum(p.numel() for p in model.parameters())
    assert 1e6 < n < 10e6
    again = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok2 = AutoTokenizer.from_pretrained(tiny_dir)
    assert tok2("Talk: hi")["input_ids"] == tok("Talk: hi")["input_ids"]
    sd1, sd2 = model.state_dict(), again.state_dict()
    assert all((sd1[k] == sd2[k]).all() for k in sd1)


def test_tokenizer_training_is_deterministic():
    a, b = build_tokenizer(vocab_size=600, games=100), build_tokenizer(vocab_size=600, games=100)
    assert a.get_vocab() == b.get_vocab()
