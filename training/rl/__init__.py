"""Reinforcement learning on whole episodes of the live games: what GRPO and SDPO share
(``run.py``) and SDPO's hindsight teacher (``hindsight.py``)."""
