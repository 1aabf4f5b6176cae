"""FP8 export for vLLM: llm-compressor's FP8_DYNAMIC scheme, written in the compressed-tensors format.

What it is: ``oneshot`` with ``QuantizationModifier(targets="Linear", scheme="FP8_DYNAMIC",
ignore=["lm_head"])``: every Linear layer's weights become FP8 (E4M3) with one scale per output
channel, activations are quantized per token at run time (so no calibration data is needed), and the
output head stays in full precision. The folder it writes is what vLLM loads directly
(``vllm serve OUT``). A report with the check of what was written lands in ``OUT/quantization.json``.

llm-compressor 0.14 pins transformers <= 5.17 while the training stack uses 5.23, so this step runs
in its own environment (README, "FP8 export"):

    python -m venv .venv-quantize && .venv-quantize/bin/pip install -r requirements-quantize.txt
    .venv-quantize/bin/pip install --no-deps -e .
    .venv-quantize/bin/python training/quantize.py --model runs/grpo/final --out runs/grpo/fp8

``python training/grpo.py --push-to-hub`` calls it for you (``training/common/hub.py`` finds that environment).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SCHEME = "FP8_DYNAMIC"
KEEP = ["lm_head"]  # the output head stays in full precision (vLLM's recommended recipe)
INSTALL_HINT = ("llm-compressor is not installed in this environment. It pins transformers <= 5.17, so it "
                "lives in its own: python -m venv .venv-quantize && .venv-quantize/bin/pip install -r "
                "requirements-quantize.txt && .venv-quantize/bin/pip install --no-deps -e .")


def check_fp8_folder(out: Path) -> dict:
    """Read back what was written: compressed-tensors config, FP8 Linear weights, lm_head untouched."""
    from safetensors import safe_open  # noqa: PLC0415

    config = json.loads((out / "config.json").read_text())
    qc = config.get("quantization_config") or {}
    if qc.get("quant_method") != "compressed-tensors":
        raise RuntimeError(f"{out}/config.json has no compressed-tensors quantization_config")
    dtypes: dict[str, str] = {}
    for shard in sorted(out.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                dtypes[name] = str(f.get_slice(name).get_dtype())
    fp8 = sorted(n for n, d in dtypes.items() if "F8" in d.upper() or "FLOAT8" in d.upper())
    if not fp8:
        raise RuntimeError(f"no FP8 tensors in {out}")
    head = [n for n in fp8 if n.startswith("lm_head")]
    if head:
        raise RuntimeError(f"lm_head was quantized: {head}")
    return {"format": qc.get("format"), "quant_method": qc["quant_method"], "ignore": qc.get("ignore"),
            "fp8_tensors": len(fp8), "tensors": len(dtypes), "example_fp8_tensor": fp8[0],
            "bytes": sum(p.stat().st_size for p in out.glob("*.safetensors"))}


def fidelity(src: Path, dst: Path, text: str) -> dict:
    """Load the FP8 folder back through transformers (compressed-tensors decompresses it) and compare
    next-token predictions with the source model on ``text``."""
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    ids = AutoTokenizer.from_pretrained(src)(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)(ids).logits.float()
        got = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32)(ids).logits.float()
    return {"tokens": int(ids.shape[1]), "top1_agreement": float((ref.argmax(-1) == got.argmax(-1)).float().mean()),
            "max_abs_logit_diff": float((ref - got).abs().max())}


SAMPLE = ("Negotiate the price of a product. Product: a desk lamp, list price $49.99. Your budget: $40.00.\n"
          "Thought: No ask yet. Offer $27.00.\nTalk: Would you take $27.00?\nAction: [BUY] $27.00")


def quantize(model: str, out: str) -> dict:
    """Quantize ``model`` (a saved folder) to FP8 into ``out``; returns the report."""
    try:
        from llmcompressor import oneshot  # noqa: PLC0415
        from llmcompressor.modifiers.quantization import QuantizationModifier  # noqa: PLC0415
    except ImportError as exc:
        raise SystemExit(INSTALL_HINT) from exc
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    src, dst = Path(model), Path(out)
    if not (src / "config.json").is_file():
        raise SystemExit(f"--model must be a saved model folder (no config.json in {src})")
    start = time.perf_counter()
    # oneshot re-reads the config from the model's folder, so it is handed a saved model
    net = AutoModelForCausalLM.from_pretrained(src, dtype="auto")
    tok = AutoTokenizer.from_pretrained(src)
    recipe = QuantizationModifier(targets="Linear", scheme=SCHEME, ignore=KEEP)
    oneshot(model=net, recipe=recipe)
    dst.mkdir(parents=True, exist_ok=True)
    net.save_pretrained(dst, save_compressed=True)
    tok.save_pretrained(dst)
    report = {"source": str(src), "scheme": SCHEME, "ignore": KEEP,
              "source_bytes": sum(p.stat().st_size for p in src.glob("*.safetensors")),
              **check_fp8_folder(dst), "fidelity": fidelity(src, dst, SAMPLE),
              "wall_time_s": round(time.perf_counter() - start, 3)}
    (dst / "quantization.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="saved model folder (merge any LoRA first)")
    ap.add_argument("--out", required=True, help="output folder for the FP8 model")
    a = ap.parse_args(argv)
    report = quantize(a.model, a.out)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
