"""The command of a recipe whose run is one experiment and one report: the command line that
reproduces a config, the run that times the experiment and writes its report, and the parsing of
``python -m recipes.<name> run [options]`` into that run (the Blind Cliffwalk and the off-policy
recipes), which says what it is about to run first (``recipes/common/launch.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from recipes.common import cli, launch, outputs

__all__ = ["Experiment", "ExperimentConfig"]


class ExperimentConfig(Protocol):
    """A recipe's config dataclass: it names the folder the report goes to."""

    @property
    def out_dir(self) -> str: ...


ConfigT = TypeVar("ConfigT", bound=ExperimentConfig)
ResultsT = TypeVar("ResultsT")


@dataclass(frozen=True)
class Experiment(Generic[ConfigT, ResultsT]):
    """``python -m recipes.<name> run``: ``run(config)`` timed, then ``write(results, config,
    runtime_s, command)`` puts ``<name>.md``, ``<name>.json`` and the plots in ``config.out_dir``
    and returns their paths (the table and the JSON first)."""

    name: str
    """The recipe's folder under ``recipes/``, and the stem of its report's files."""
    config: type[ConfigT]
    """The config dataclass; its defaults are the command's."""
    run: Callable[[ConfigT], ResultsT]
    """The experiment."""
    write: Callable[[ResultsT, ConfigT, float, str], list[Path]]
    """The report: the results, the config, the runtime in seconds and :meth:`command_line`."""
    plan: Callable[[ConfigT], launch.RunPlan] | None = None
    """What a config is about to run: :meth:`command` prints it (:func:`launch.confirm`) before
    :meth:`main`; ``None``: nothing is printed."""

    @property
    def prog(self) -> str:
        """The command: ``python -m recipes.<name> run``."""
        return f"python -m recipes.{self.name} run"

    def command_line(self, config: ConfigT) -> str:
        """The command that reproduces ``config``: the recipe with its non-default arguments."""
        return outputs.command_line(self.prog, config, self.config())

    def main(self, config: ConfigT | None = None) -> ResultsT:
        """Run the experiment and write the table, the JSON and the plots to ``config.out_dir``."""
        config = self.config() if config is None else config
        out_dir = Path(config.out_dir)
        start = time.perf_counter()
        results = self.run(config)
        runtime = time.perf_counter() - start
        written = self.write(results, config, runtime, self.command_line(config))
        name = self.name
        print(f"wrote {out_dir}/{name}.md, {name}.json and {len(written) - 2} plot(s) in {runtime:.0f} s")
        return results

    def command(self, argv: list[str]) -> ResultsT:
        """``python -m recipes.<name> run [options]``: its options, what will run (asked about on a
        terminal when over an hour, unless ``--yes``), then :meth:`main`."""
        yes, options = launch.take_yes(argv)
        config = cli.parse(self.config, options, prog=self.prog)
        if self.plan is not None:
            launch.confirm(self.plan(config), yes)
        return self.main(config)
