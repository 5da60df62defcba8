"""``python -m benchmarks``: run the ratio benchmark (:func:`benchmarks.ratio.main`)."""

import sys

from benchmarks.ratio import main

sys.exit(main())
