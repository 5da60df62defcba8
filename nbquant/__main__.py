"""``python -m nbquant``: the same command line as the ``nbquant`` script (see :mod:`nbquant.cli`)."""

from nbquant.cli import run

if __name__ == "__main__":
    run()
