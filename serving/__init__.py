"""Haggle's games served with OpenEnv (FastAPI, pydantic, openenv-core), and their typed clients.

``python -m serving`` runs a server (``serving.app``); ``serving.bargain`` and ``serving.market``
hold each game's typed action, observation and state and its ``Environment``; ``serving.client``
the typed clients; ``serving.openenv_adapter`` the one use of openenv-core's private API.
The games themselves live in ``env`` and know nothing of any of this.
"""
