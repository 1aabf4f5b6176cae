"""The Space's building blocks: live games, the model seat, and figures read from artifacts/."""
