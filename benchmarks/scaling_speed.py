"""Data parallelism on this machine: the same GRPO (and SFT) run with one process and with N
processes started by ``accelerate launch``, wall time and episodes per second, in one run.

Both runs train the same model on the same episodes per step: N processes each take
``batch / N`` of a step's episodes (``--per_device_train_batch_size``), as the README's "Scaling
out" says. On a CPU the processes share the cores, so this measures the cost of the split
(process start, gloo collectives, the smaller batch per process) rather than a speed-up; on N
GPUs the same commands give each process its own device.

    python benchmarks/scaling_speed.py                  # -> artifacts/benchmarks/scaling.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(script: str, args: list[str], processes: int, threads: int) -> float:
    """Wall seconds of one run (every process's start included)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, script, *args] if processes == 1 else [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
        str(_port()), script, *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    return wall


def main(argv: list[str] | None = None) -> dict:
    from training.common.provenance import command_line, provenance, write_json  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="", help="model folder (default: build the tiny model)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4, help="GRPO steps")
    ap.add_argument("--batch", type=int, default=8, help="episodes per step (all processes together)")
    ap.add_argument("--out", default="artifacts/benchmarks/scaling.json")
    a = ap.parse_args(argv)
    if a.batch % a.processes:
        ap.error("--batch must divide among --processes")
    start = time.perf_counter()
    cores = os.cpu_count() or 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if not model:
            model = str(Path(tmp) / "tiny")
            subprocess.run([sys.executable, "training/build_tiny.py", "--out", model], cwd=ROOT, check=True,
                           capture_output=True)
        for n in (1, a.processes):
            grpo = ["--model_name_or_path", model, "--max_steps", str(a.steps), "--per_device_train_batch_size",
                    str(a.batch // n), "--gradient_accumulation_steps", "1", "--num_generations", "4",
                    "--save_steps", "1000", "--max_new_tokens", "16", "--max_turns", "2",
                    "--output_dir", str(Path(tmp) / f"grpo{n}"), "--curve", str(Path(tmp) / f"grpo{n}.json")]
            sft = ["--smoke", "--model", model, "--output_dir", str(Path(tmp) / f"sft{n}"),
                   "--curve", str(Path(tmp) / f"sft{n}.json")]
            threads = max(1, cores // n)  # the cores shared among the processes
            g = launch("training/grpo.py", grpo, n, threads)
            s = launch("training/sft.py", sft, n, threads)
            curve = json.loads((Path(tmp) / f"grpo{n}.json").read_text())
            episodes = sum(p["episodes"] for p in curve["points"])
            rows.append({"processes": n, "threads_per_process": threads, "grpo_wall_s": g, "grpo_episodes": episodes,
                         "grpo_episodes_per_s": episodes / g, "sft_smoke_wall_s": s})
            print(f"{n} process(es): GRPO {g:.1f} s for {episodes} episodes, SFT smoke {s:.1f} s", flush=True)
    one, many = rows[0], rows[-1]
    artifact = {"provenance": provenance(vars(a), {"grpo": "training/grpo.py's rows (seed 0)"},
                                         time.perf_counter() - start,
                                         command_line(__file__, [__file__, *(sys.argv[1:] if argv is None else argv)])),
                "cpu_cores": cores, "runs": rows,
                "ratio": {"grpo_wall_s": many["grpo_wall_s"] / one["grpo_wall_s"],
                          "sft_smoke_wall_s": many["sft_smoke_wall_s"] / one["sft_smoke_wall_s"]},
                "note": "CPU processes share this machine's cores: the ratio is the cost of the split here, not "
                        "the speed-up N GPUs give"}
    if a.out:
        write_json(a.out, artifact)
    return artifact


if __name__ == "__main__":
    main()
