"""``tracegen``: make Fastrack Parquet traces (convert, capture, synth) and inspect them (info)."""

from __future__ import annotations

import click

from fastrack_core.version import __version__
from fastrack_core.cli_support import LazyGroup, verbosity_options

COMMANDS = {
    "convert": "tracegen.convert:command",
    "capture": "tracegen.capture:command",
    "synth": "tracegen.synth:command",
    "info": "tracegen.info:command",
}


@click.group(cls=LazyGroup, lazy_commands=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracegen")
@verbosity_options
def main() -> None:
    """Make Fastrack traces (Parquet, schema v1) and inspect them.

    Shell completion, bash: eval "$(_TRACEGEN_COMPLETE=bash_source tracegen)" (zsh: zsh_source,
    fish: fish_source).
    """


if __name__ == "__main__":
    main()
