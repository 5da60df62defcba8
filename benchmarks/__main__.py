"""``python -m benchmarks``: the ratio benchmark (:func:`benchmarks.ratio.main`); ``--help`` lists the options."""

import sys

from .ratio import main

sys.exit(main())
