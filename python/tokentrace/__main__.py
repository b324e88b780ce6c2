"""`tokentrace ...` (the console script `pip install` puts on PATH) and `python -m tokentrace ...`:
both run the `tokentrace` program that is installed in this package folder (or, in a
development tree, the one in $TOKENTRACE_NATIVE_DIR), with the same arguments.

The program is C++ (src/cli/): it must exec the traced job itself so that the job keeps its
pid, and it finds libtokentrace.so and python_boot/ next to itself. This wrapper only hands
over: it imports neither torch nor the extension.
"""

import os
import sys


def main(argv=None):
    from ._common import loader
    args = sys.argv[1:] if argv is None else list(argv)
    program = loader.find_program()
    if program is None:
        print("tokentrace: the `tokentrace` program is not in this installation (looked in "
              f"{os.path.dirname(os.path.abspath(__file__))}); reinstall with pip install . "
              "(or build with scripts/setup.sh and set TOKENTRACE_NATIVE_DIR)", file=sys.stderr)
        return 1
    # `tokentrace plot` runs Python: this interpreter, which has this package (and perhaps
    # matplotlib), unless the user chose one.
    os.environ.setdefault("TOKENTRACE_PYTHON", sys.executable)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(program, [program] + args)
    except OSError as exc:
        print(f"tokentrace: cannot run {program}: {exc.strerror}", file=sys.stderr)
    return 126


if __name__ == "__main__":
    sys.exit(main())
