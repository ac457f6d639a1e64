"""Command lines and imports of the flat modules ``recipes/`` held before one folder per recipe.

``python -m recipes.atari_ddqn …`` prints the command that replaced it and exits 2;
``import recipes.atari_ddqn`` raises ``ModuleNotFoundError`` naming the module that holds its code
now.  A finder on ``sys.meta_path`` answers for these names only, after every other finder.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import CodeType, ModuleType

__all__ = ["MOVED", "MovedModules", "install"]

MOVED: dict[str, tuple[str, str]] = {
    # old module: (the module holding its code now, the command replacing ``python -m recipes.<old>``)
    "atari_ddqn": ("recipes.dqn.run", "python -m recipes.dqn train"),
    "dqn_config": ("recipes.dqn.config", "python -m recipes.dqn"),
    "dqn_envs": ("recipes.dqn.envs", "python -m recipes.dqn"),
    "dqn_model": ("recipes.dqn.networks", "python -m recipes.dqn"),
    "dqn_parts": ("recipes.dqn.parts", "python -m recipes.dqn"),
    "dqn_run": ("recipes.dqn.loop", "python -m recipes.dqn"),
    "dqn_update": ("recipes.dqn.update", "python -m recipes.dqn"),
    "dqn_stacked": ("recipes.dqn.stacked", "python -m recipes.dqn"),
    "dqn_together": ("recipes.dqn.together", "python -m recipes.dqn together"),
    "dqn_sweep": ("recipes.dqn.sweep", "python -m recipes.dqn sweep (or plot)"),
    "dqn_sweep_report": ("recipes.dqn.sweep_report", "python -m recipes.dqn"),
    "atari_stats": ("recipes.dqn.stats", "python -m recipes.dqn stats"),
    "atari_sweep": ("recipes.dqn.atari_sweep", "python -m recipes.dqn atari-sweep"),
    "apex_dqn": ("recipes.apex.run", "python -m recipes.apex train"),
    "apex_config": ("recipes.apex.config", "python -m recipes.apex"),
    "apex_fleet": ("recipes.apex.fleet", "python -m recipes.apex"),
    "apex_nstep": ("recipes.apex.nstep", "python -m recipes.apex"),
    "apex_record": ("recipes.apex.record", "python -m recipes.apex"),
    "apex_report": ("recipes.apex.report", "python -m recipes.apex"),
    "apex_studies": ("recipes.apex.studies", "python -m recipes.apex scaling (or compare)"),
    "actor_learner": ("recipes.apex.actor_learner", "python -m recipes.apex actor-learner"),
    "cliffwalk_report": ("recipes.cliffwalk.report", "python -m recipes.cliffwalk run"),
    "offpolicy_config": ("recipes.offpolicy.config", "python -m recipes.offpolicy run"),
    "offpolicy_model": ("recipes.offpolicy.model", "python -m recipes.offpolicy run"),
    "offpolicy_report": ("recipes.offpolicy.report", "python -m recipes.offpolicy run"),
    "imbalanced_mnist_config": ("recipes.imbalanced_mnist.config", "python -m recipes.imbalanced_mnist"),
    "imbalanced_mnist_report": ("recipes.imbalanced_mnist.report", "python -m recipes.imbalanced_mnist"),
    "imbalanced_mnist_lr_sweep": (
        "recipes.imbalanced_mnist.lr_sweep",
        "python -m recipes.imbalanced_mnist lr-sweep",
    ),
    "mnist_data": ("recipes.imbalanced_mnist.data", "python -m recipes.imbalanced_mnist prepare"),
    "per_vs_uniform": ("recipes.studies.per_vs_uniform", "python -m recipes.studies per-vs-uniform"),
    "replay_ablation": ("recipes.studies.replay_ablation", "python -m recipes.studies replay-ablation"),
    "supervised_beta": ("recipes.studies.supervised_beta", "python -m recipes.studies supervised-beta"),
    "sb3_cartpole": ("recipes.studies.sb3_cartpole", "python -m recipes.studies sb3-cartpole"),
    "diagnostics_figures": (
        "recipes.studies.diagnostics_figures",
        "python -m recipes.studies diagnostics-figures",
    ),
    "cli": ("recipes.common.cli", "python -m recipes"),
    "outputs": ("recipes.common.outputs", "python -m recipes"),
    "rl_metrics": ("recipes.common.rl_metrics", "python -m recipes"),
    "lightning_cli": ("recipes.common.lightning_cli", "python -m recipes"),
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Finds ``recipes.<old>`` for the names of :data:`MOVED`: run, it names the new command and
    exits 2; imported, it raises ``ModuleNotFoundError`` naming the new module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != "recipes" or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def exec_module(self, module: ModuleType) -> None:
        new_module, _ = MOVED[module.__name__.rpartition(".")[2]]
        raise ModuleNotFoundError(
            f"{module.__name__} moved to {new_module} (one folder per recipe; see CHANGELOG.md)",
            name=module.__name__,
        )

    def get_source(self, fullname: str) -> str:
        """What ``python -m recipes.<old>`` runs: the new command on stderr, exit status 2."""
        _, command = MOVED[fullname.rpartition(".")[2]]
        message = f"python -m {fullname} moved: run {command} (with no arguments it lists its commands)"
        return f"import sys\nprint({message!r}, file=sys.stderr)\nraise SystemExit(2)\n"

    def get_code(self, fullname: str) -> CodeType:
        return compile(self.get_source(fullname), f"<moved {fullname}>", "exec")

    def is_package(self, fullname: str) -> bool:
        return False


def install() -> None:
    """Put the finder at the end of ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
