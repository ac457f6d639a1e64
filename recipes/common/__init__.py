"""Plumbing every recipe shares: the command line, output files, RL metrics, LightningCLI."""

__all__: list[str] = []
