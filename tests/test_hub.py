"""Publishing to the Hub: token checks before training, FP8 export, model card, upload end to end
against a local fake of the Hub's HTTP API (``tests/fake_hub.py``)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_hub import FakeHub
from training.common import hub
from training.common.provenance import command_line

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "hf_fakeSecretToken1234567890abcdef"  # must never show up in any output or file


def _env(tmp_path, url, token):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=url, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_OFFLINE="0")
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def _grpo(tmp_path, model, env, *extra):
    cmd = [sys.executable, "training/grpo.py", "--smoke", "--model_name_or_path", str(model),
           "--output_dir", str(tmp_path / "grpo"), "--curve", str(tmp_path / "curve.json"), *extra]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _safetensors_dtypes(data: bytes) -> dict[str, str]:
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8: 8 + n])
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


@pytest.mark.slow
@pytest.mark.parametrize("token, message", [(None, "no Hugging Face token"), ("hf_wrong", "rejected the token")])
def test_missing_or_rejected_token_fails_before_training(tmp_path, tiny_dir, token, message):
    with FakeHub(TOKEN) as fake:
        proc = _grpo(tmp_path, tiny_dir, _env(tmp_path, fake.url, token), "--push-to-hub",
                     "--hub-model-id", "alice/haggle-buyer")
    assert proc.returncode != 0
    assert message in proc.stderr and "nothing was trained" in proc.stderr
    assert not (tmp_path / "grpo").exists() and not (tmp_path / "curve.json").exists(), "no training happened"
    assert "hf_wrong" not in proc.stdout + proc.stderr
    assert not fake.repos


def test_preflight_refuses_read_only_tokens_foreign_namespaces_and_bad_ids(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with FakeHub(TOKEN, role="read") as fake:
        monkeypatch.setattr(constants, "ENDPOINT", fake.url)
        with pytest.raises(hub.HubError, match="read-only"):
            hub.preflight("alice/x")
    with FakeHub(TOKEN) as fake:
        monkeypatch.setattr(constants, "ENDPOINT", fake.url)
        with pytest.raises(hub.HubError, match="cannot write to 'bob'"):
            hub.preflight("bob/x")
        with pytest.raises(hub.HubError, match="not a valid repo id"):
            hub.preflight("alice/bad name!")
        with pytest.raises(hub.HubError, match="needs --hub_model_id"):
            hub.preflight("")
        monkeypatch.setenv("HAGGLE_QUANTIZE_PYTHON", "")
        monkeypatch.setattr(hub, "quantize_python", lambda: None)
        with pytest.raises(hub.HubError, match="requirements-quantize.txt"):
            hub.preflight("haggle-org/x")  # an organisation of the user is fine; the FP8 env is missing


def test_push_to_hub_end_to_end_uploads_fp8_model_card_and_curve(tmp_path, tiny_dir):
    if hub.quantize_python() is None:
        pytest.skip("no FP8 environment (.venv-quantize or HAGGLE_QUANTIZE_PYTHON); .ci/run builds one")
    with FakeHub(TOKEN) as fake:
        proc = _grpo(tmp_path, tiny_dir, _env(tmp_path, fake.url, TOKEN), "--push-to-hub",
                     "--hub-model-id", "alice/haggle-tiny-grpo", "--card_eval", str(ROOT / "artifacts/eval_results.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not fake.unknown, fake.unknown
    repo = fake.repos["alice/haggle-tiny-grpo"]
    files = repo["files"]
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "curve.json", "eval_results.json",
            "quantization.json", "lineage.json"} <= set(files)
    config = json.loads(files["config.json"])
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert config["quantization_config"]["format"] == "float-quantized"
    dtypes = _safetensors_dtypes(files["model.safetensors"])
    fp8 = [k for k, d in dtypes.items() if d.startswith("F8")]
    assert any(k.endswith("q_proj.weight") for k in fp8) and any(k.endswith("down_proj.weight") for k in fp8)
    assert not any(k.startswith("lm_head") for k in fp8), "lm_head stays in full precision"
    assert not any("embed_tokens" in k for k in fp8)
    card = files["README.md"].decode()
    assert card.startswith("---\n") and "fp8" in card and "haggle-tiny" in card
    assert "| grpo |" in card and "| expert |" in card, "the evaluation table comes from the artifact"
    assert fake.yaml_checked and fake.yaml_checked[-1] == card, "the card's metadata was validated before upload"
    curve = json.loads(files["curve.json"])
    assert curve["points"] and curve["provenance"]["config"]["push_to_hub"] is True
    lineage = json.loads(files["lineage.json"])
    assert lineage["base_model"] == "haggle-tiny" and lineage["stages"][-1]["stage"] == "grpo"
    # the token travels only in the Authorization header, never in output or files
    assert all(h == f"Bearer {TOKEN}" for h in fake.auth_headers)
    assert TOKEN not in proc.stdout + proc.stderr
    for blob in files.values():
        assert TOKEN.encode() not in blob
    for path in tmp_path.rglob("*"):
        if path.is_file() and "hf-home" not in path.parts:
            assert TOKEN.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_push_to_hub_merges_a_llama_lora_adapter_and_exports_it_as_fp8(tmp_path, tiny_llama_dir):
    """SmolLM2's path at a small size: LoRA SFT ships an adapter, GRPO continues it, and the push merges
    the adapter into its Llama base before llm-compressor writes FP8."""
    if hub.quantize_python() is None:
        pytest.skip("no FP8 environment (.venv-quantize or HAGGLE_QUANTIZE_PYTHON); .ci/run builds one")
    sft = subprocess.run([sys.executable, "training/sft.py", "--smoke", "--model", str(tiny_llama_dir),
                          "--output_dir", str(tmp_path / "sft"), "--curve", ""],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert sft.returncode == 0, sft.stderr[-3000:]
    adapter = tmp_path / "sft" / "final"
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()
    with FakeHub(TOKEN) as fake:
        proc = _grpo(tmp_path, adapter, _env(tmp_path, fake.url, TOKEN), "--push-to-hub",
                     "--hub-model-id", "alice/haggle-llama-grpo", "--card_eval", str(ROOT / "artifacts/eval_results.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = fake.repos["alice/haggle-llama-grpo"]["files"]
    config = json.loads(files["config.json"])
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    dtypes = _safetensors_dtypes(files["model.safetensors"])
    assert not any("lora" in k for k in dtypes), "the adapter was merged, not uploaded beside the base"
    fp8 = {k for k, d in dtypes.items() if d.startswith("F8")}
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert any(k.endswith(f"{proj}.weight") for k in fp8), proj
    assert not any(k.startswith("lm_head") or "embed_tokens" in k for k in fp8)
    lineage = json.loads(files["lineage.json"])
    assert [s["stage"] for s in lineage["stages"]][-3:] == ["sft", "grpo", "merge"]
    assert (tmp_path / "grpo" / "final" / "adapter_config.json").is_file(), "the adapter itself is kept"


def test_model_card_names_a_hub_base_model_as_quantized(tmp_path):
    import yaml

    quant = {"scheme": "FP8_DYNAMIC", "fp8_tensors": 196, "source_bytes": 1.2e9, "bytes": 0.7e9,
             "fidelity": {"top1_agreement": 0.99}}
    card = hub.model_card("me/buyer", method="GRPO", base_model="Qwen/Qwen3-0.6B", reasoning_mode="option_b",
                          curve_path="", eval_path=ROOT / "artifacts/eval_results.json", quant=quant,
                          lineage={"stages": [{"stage": "sft"}, {"stage": "grpo"}]})
    meta = yaml.safe_load(str(card).split("---")[1])
    assert meta["base_model"] == "Qwen/Qwen3-0.6B" and meta["base_model_relation"] == "quantized"
    assert "sft -> grpo" in card.text and "<think>" in card.text
    rows = json.loads((ROOT / "artifacts/eval_results.json").read_text())["rows"]
    for r in rows:
        if r["seller"] == "mix":
            assert f"| {r['buyer']} |" in card.text and f"{r['reward_mean']:+.3f}" in card.text
    local = hub.model_card("me/buyer", method="SDPO", base_model="haggle-tiny", reasoning_mode="option_a",
                           curve_path="", eval_path=tmp_path / "missing.json", quant=quant, lineage=None)
    meta = yaml.safe_load(str(local).split("---")[1])
    assert "base_model" not in meta and "base_model_relation" not in meta, "no Hub id to point at"
    assert "No evaluation artifact" in local.text


@pytest.mark.parametrize("argv, shown", [
    (["x.py", "--hub_token", "s3cret", "--lr", "1"], "python x.py --hub_token '***' --lr 1"),
    (["x.py", "--hub-token=s3cret"], "python x.py '--hub-token=***'"),
    (["x.py", "--token", "s3cret"], "python x.py --token '***'"),
    (["x.py", "--push_to_hub", "--hub_model_id", "a/b", "--max_new_tokens", "64", "--think-tokens", "8"],
     "python x.py --push_to_hub --hub_model_id a/b --max_new_tokens 64 --think-tokens 8"),
])
def test_command_lines_never_carry_a_token(argv, shown):
    assert command_line("x.py", argv) == shown
