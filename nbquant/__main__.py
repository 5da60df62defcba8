"""``python -m nbquant``: the same command line as the ``nbquant`` script (see :mod:`nbquant.cli`)."""

import sys

from nbquant.cli import main

if __name__ == "__main__":
    sys.exit(main())
