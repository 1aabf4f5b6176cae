"""What every script shares: the command-line convention, artifacts with provenance, Hub publishing."""
