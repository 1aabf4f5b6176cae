"""RL runs' curves side by side: one row per run, the numbers a recipe is chosen by (``training/rl/compare.py``).

    python training/compare_runs.py control=artifacts/probes/grpo2_short_control_training_curve.json \\
        spares=artifacts/probes/grpo2_short_spares_training_curve.json
"""

from __future__ import annotations

from training.rl.compare import main

if __name__ == "__main__":
    main()
