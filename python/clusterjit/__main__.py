"""``python3 -m clusterjit SUBCOMMAND ...``: the ``cjit`` command line (run, check, bench, flags, explain,
compile, ...; ``python3 -m clusterjit help``). It executes the ``cjit`` program installed with this package:
``$CJIT_CLI`` when set, else the one recorded at build time (clusterjit/_build_info.py), else ``cjit`` on PATH.
"""
import os
import shutil
import sys


def cli_path():
    """The cjit program this package forwards to, or None."""
    env = os.environ.get("CJIT_CLI")
    if env:
        return env
    try:
        from . import _build_info
        if os.access(_build_info.CLI, os.X_OK):
            return _build_info.CLI
    except ImportError:
        pass
    return shutil.which("cjit")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    cli = cli_path()
    if cli is None:
        sys.stderr.write("python3 -m clusterjit: the cjit program is not installed with this package and not on "
                         "PATH (set CJIT_CLI to its path)\n")
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cli, [cli] + list(argv))


if __name__ == "__main__":
    sys.exit(main())
