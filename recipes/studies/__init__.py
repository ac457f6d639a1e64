"""Registered comparisons and ablations across recipes.

``python -m recipes.studies`` with no arguments lists its commands; ``<command> --help`` lists
a command's options."""

from __future__ import annotations

from recipes.common.cli import Command

__all__ = ["COMMANDS", "DEFAULT", "DESCRIPTION"]

DESCRIPTION = "Registered comparisons and ablations across recipes."
DEFAULT = None
"""Every command line names its command."""
COMMANDS = (
    Command(
        "per-vs-uniform",
        "the registered PER-vs-uniform comparison (run, then report)",
        "recipes.studies.per_vs_uniform:main",
        parser="recipes.studies.per_vs_uniform_config:parse_command",
    ),
    Command(
        "replay-ablation",
        "uniform, proportional, rank, LAP and LaBER arms of the DQN recipe on two environments",
        "recipes.studies.replay_ablation:main",
    ),
    Command(
        "supervised-beta",
        "which β for prioritized supervised learning: uniform, β = 0, β annealed 0.4 → 1",
        "recipes.studies.supervised_beta:main",
        parser="recipes.studies.supervised_beta_config:parse",
    ),
    Command(
        "sb3-cartpole",
        "Stable-Baselines3 DQN with prisample's buffer on RL Zoo's CartPole",
        "recipes.studies.sb3_cartpole:main",
        parser="recipes.studies.sb3_cartpole_config:parse",
    ),
    Command(
        "atari-pong",
        "Pong at 10M frames against Dopamine's baselines, one run per GPU call (next, then merge)",
        "recipes.studies.atari_pong:main",
        parser="recipes.studies.atari_pong_config:parse_command",
    ),
    Command(
        "diagnostics-figures",
        "the paper's replay diagnostics (Sec. 5, Figs. 10-11) on two short runs",
        "recipes.studies.diagnostics_figures:main",
        parser="recipes.studies.diagnostics_figures_config:parse",
    ),
)
