"""`gregor completion bash|zsh`: a shell completion script for every command and flag, made from
the parser itself by shtab.

    gregor completion bash > ~/.local/share/bash-completion/completions/gregor
    gregor completion zsh > "${fpath[1]}/_gregor"
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction, root: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(func=lambda args: _print(root, args.shell))


def _print(root: argparse.ArgumentParser, shell: str) -> int:
    import shtab

    sys.stdout.write(shtab.complete(root, shell=shell))
    sys.stdout.flush()
    return 0
