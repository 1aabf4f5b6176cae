"""Haggle training: model players, rollouts, SFT/GRPO/SDPO and evaluation scripts."""
