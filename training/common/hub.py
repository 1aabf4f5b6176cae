"""Publishing a trained buyer on the Hugging Face Hub: preflight, FP8 export, model card, upload.

``python training/grpo.py --push-to-hub --hub-model-id USER/NAME`` (and ``sdpo.py``) call
``preflight`` before anything is trained: a missing, rejected or read-only token, a namespace the
token cannot write to, or a missing FP8 environment fails there with a clear message. After
training, ``publish`` quantizes the merged checkpoint to FP8 (``training/quantize.py``, llm-compressor,
in its own environment), writes the model card and uploads model, card, training curve and
evaluation table with ``huggingface_hub``. The token comes from ``HF_TOKEN`` or the saved login
(``hf auth login``); it is never printed or written anywhere.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from training.common.provenance import REPO_ROOT, read_lineage

QUANTIZE_SCRIPT = REPO_ROOT / "training" / "quantize.py"
QUANTIZE_VENV = REPO_ROOT / ".venv-quantize" / "bin" / "python"
QUANTIZE_INSTALL = ("python -m venv .venv-quantize && .venv-quantize/bin/pip install -r requirements-quantize.txt "
                    "&& .venv-quantize/bin/pip install --no-deps -e .")
REWARD = ("clip((budget - price) / |budget - cost|, -1, 1) for a deal (the gap floored at $1); -1 for a deal over "
          "budget, an unreadable reply or an illegal move; 0 when no deal is made")


class HubError(RuntimeError):
    """A push cannot go ahead; the message says why and what to do."""


def quantize_python() -> str | None:
    """The interpreter that has llm-compressor: ``$HAGGLE_QUANTIZE_PYTHON``, this one, or ``.venv-quantize``."""
    candidates = [os.environ.get("HAGGLE_QUANTIZE_PYTHON", "")]
    if importlib.util.find_spec("llmcompressor") is not None:
        candidates.append(sys.executable)
    candidates.append(str(QUANTIZE_VENV))
    for py in filter(None, candidates):
        if Path(py).exists() and subprocess.run([py, "-c", "import llmcompressor, training.common.provenance"],
                                                 capture_output=True, cwd=REPO_ROOT).returncode == 0:
            return py
    return None


def preflight(repo_id: str) -> dict:
    """Check everything a push needs before training starts; returns ``repo_id`` (with namespace),
    the user and the quantize interpreter. Raises ``HubError``."""
    from huggingface_hub import HfApi, get_token  # noqa: PLC0415
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError  # noqa: PLC0415
    from huggingface_hub.utils import validate_repo_id  # noqa: PLC0415

    if not repo_id:
        raise HubError("--push_to_hub needs --hub_model_id USER/NAME")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise HubError(f"--hub_model_id {repo_id!r} is not a valid repo id (USER/NAME): {exc}") from None
    token = get_token()
    if not token:
        raise HubError("no Hugging Face token: set HF_TOKEN or run `hf auth login` (nothing was trained)")
    api = HfApi(token=token)
    try:
        me = api.whoami()
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        if status == 401:
            raise HubError("the Hub rejected the token (401 Unauthorized): check HF_TOKEN or run "
                           "`hf auth login --force` (nothing was trained)") from None
        raise HubError(f"could not check the token with {api.endpoint} (HTTP {status}); nothing was trained") from None
    except OSError as exc:  # connection errors (httpx2's transport errors derive from it or are wrapped)
        raise HubError(f"could not reach {api.endpoint}: {type(exc).__name__}; nothing was trained") from None
    role = ((me.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise HubError("the token is read-only: create a token with write access (nothing was trained)")
    namespace, _, name = repo_id.rpartition("/")
    allowed = {me.get("name")} | {o.get("name") for o in me.get("orgs") or []}
    if namespace and namespace not in allowed:
        raise HubError(f"the token belongs to {me.get('name')!r}, which cannot write to {namespace!r} "
                       f"(its organisations: {sorted(x for x in allowed - {me.get('name')} if x) or 'none'})")
    py = quantize_python()
    if py is None:
        raise HubError("the FP8 export needs llm-compressor, which lives in its own environment "
                       f"(it pins transformers <= 5.17): {QUANTIZE_INSTALL}  (or set HAGGLE_QUANTIZE_PYTHON)")
    return {"repo_id": f"{namespace or me.get('name')}/{name}", "user": me.get("name"), "quantize_python": py}


def export_fp8(model_dir: str | Path, out_dir: str | Path, python: str) -> dict:
    """Run ``training/quantize.py`` in the FP8 environment; returns its report."""
    proc = subprocess.run([python, str(QUANTIZE_SCRIPT), "--model", str(model_dir), "--out", str(out_dir)],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    if proc.returncode != 0:
        raise HubError(f"FP8 export failed:\n{proc.stderr[-2000:]}")
    return json.loads((Path(out_dir) / "quantization.json").read_text())


def _is_hub_id(name: str) -> bool:
    return name.count("/") == 1 and not Path(name).exists() and not name.startswith((".", "/"))


def eval_table(eval_path: str | Path) -> str:
    """The ``seller: mix`` rows of an evaluation artifact as a markdown table, with where they came from."""
    path = Path(eval_path)
    if not path.is_file():
        return "_No evaluation artifact was found; run `python training/evaluate.py` to make one._\n"
    art = json.loads(path.read_text())
    prov = art.get("provenance", {})
    lines = ["| buyer | format | reward (95% CI) | deal rate | bargained ratio | overshoot | format errors | episodes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in art.get("rows", []):
        if r.get("seller") != "mix":
            continue
        lo, hi = r["reward_ci95"]
        ratio = "n/a" if r.get("bargained_ratio") is None else f"{r['bargained_ratio']:.3f}"
        lines.append(f"| {r['buyer']} | {r.get('reasoning_mode', 'option_a')} | {r['reward_mean']:+.3f} "
                     f"[{lo:+.3f}, {hi:+.3f}] | {r['deal_rate']:.1%} | {ratio} | {r['overshoot_rate']:.1%} | "
                     f"{r['format_error_rate']:.1%} | {r['episodes']} |")
    models = (prov.get("config") or {}).get("buyer_models", "")
    return ("\n".join(lines) + f"\n\nAgainst the seller mix (neutral seller and six personas) on the held-out "
            f"test split ({(prov.get('config') or {}).get('dataset', '?')}). Produced by `{prov.get('command', '?')}` "
            f"at commit `{prov.get('commit', '?')}` on {prov.get('machine', '?')}; model buyers: `{models}` (this "
            f"upload is one of those rows only if it is one of those checkpoints).\n")


def model_card(repo_id: str, *, method: str, base_model: str, reasoning_mode: str, curve_path: str | Path,
               eval_path: str | Path, quant: dict, lineage: dict | None):
    """A ``huggingface_hub.ModelCard`` for the FP8 checkpoint."""
    from huggingface_hub import ModelCard, ModelCardData  # noqa: PLC0415

    hub_base = base_model if _is_hub_id(base_model) else None
    data = ModelCardData(library_name="transformers", pipeline_tag="text-generation",
                         tags=["negotiation", "rlvr", method.lower(), "fp8", "compressed-tensors", "haggle"],
                         base_model=hub_base, base_model_relation="quantized" if hub_base else None)
    curve = json.loads(Path(curve_path).read_text()) if curve_path and Path(curve_path).is_file() else {}
    points = curve.get("points", [])
    trend = ""
    rewards = [p["reward_mean"] for p in points if p.get("reward_mean") is not None]
    if rewards:
        q = max(1, len(rewards) // 4)
        trend = (f"Training reward (sampled episodes against the training products), mean of the first {q} "
                 f"steps {sum(rewards[:q]) / q:+.3f}, of the last {q} {sum(rewards[-q:]) / q:+.3f}, over "
                 f"{len(rewards)} steps; every step is in `{Path(curve_path).name}`.\n")
    chain = " -> ".join(s["stage"] for s in (lineage or {}).get("stages", [])) or method.lower()
    base_text = (f"[{base_model}](https://huggingface.co/{base_model})" if hub_base else
                 f"`{base_model}` (the 3.4 M-parameter Qwen3-architecture model Haggle builds offline)")
    body = f"""
# {repo_id.split('/')[-1]}

A buyer that negotiates prices, trained with reinforcement learning from verifiable rewards in
Haggle's bilateral price negotiation (a buyer with a private budget against a seller with a private cost), then quantized to FP8.

- **Base model:** {base_text}; training chain: {chain}.
- **Method:** {method}: whole multi-turn episodes against a frozen seller (a neutral seller and six
  personas), the buyer's own tokens trained and the seller's masked out; groups of episodes share
  product, seller and seed so the group baseline compares behaviours on the same game.
- **Reward:** {REWARD}. The budget and the seller's cost are private.
- **Reply format:** `{reasoning_mode}` ({'a Thought line' if reasoning_mode == 'option_a' else 'a <think> block'},
  then `Talk:` and `Action:` with `[BUY] $X`, `[DEAL] $X`, `[REJECT]` or `[QUIT]`).
- **Quantization:** llm-compressor `{quant.get('scheme')}` (FP8 weights per channel, dynamic per-token
  activations), `lm_head` kept in full precision, compressed-tensors format that vLLM loads directly.
  {quant.get('fp8_tensors')} FP8 tensors; {quant.get('source_bytes', 0) / 1e6:.1f} MB -> {quant.get('bytes', 0) / 1e6:.1f} MB.
  Read back through transformers, next-token agreement with the full-precision model on a sample:
  {quant.get('fidelity', {}).get('top1_agreement', float('nan')):.1%}.

## Evaluation

{eval_table(eval_path)}
{trend}
## Use

```bash
vllm serve {repo_id}
```
"""
    return ModelCard(f"---\n{data.to_yaml()}\n---\n{body}")


def publish(final_dir: str | Path, repo_id: str, *, method: str, reasoning_mode: str, curve_path: str | Path,
            eval_path: str | Path, python: str, private: bool | None = None) -> str:
    """FP8-export ``final_dir``, write the card, upload model + card + curve + evaluation; returns the commit URL."""
    from huggingface_hub import HfApi  # noqa: PLC0415

    final_dir = Path(final_dir)
    out = final_dir.parent / "fp8"
    if out.exists():
        shutil.rmtree(out)
    quant = export_fp8(final_dir, out, python)
    lineage = read_lineage(final_dir)
    base = (lineage or {}).get("base_model") or "unknown"
    for extra in (curve_path, eval_path):
        if extra and Path(extra).is_file():
            shutil.copy2(extra, out / Path(extra).name)
    if lineage:
        shutil.copy2(final_dir / "lineage.json", out / "lineage.json")
    card = model_card(repo_id, method=method, base_model=base, reasoning_mode=reasoning_mode, curve_path=curve_path,
                      eval_path=eval_path, quant=quant, lineage=lineage)
    card.save(out / "README.md")
    api = HfApi()
    api.create_repo(repo_id, exist_ok=True, private=private)
    info = api.upload_folder(folder_path=out, repo_id=repo_id,
                             commit_message=f"Haggle {method} buyer, FP8 (compressed-tensors)")
    return info.commit_url
