"""``python -m serving``: serve a Haggle game with OpenEnv (see ``serving.app``)."""

from serving.app import main

main()
