"""nbquant's benchmark tools, kept outside the installed package (run from the repository root).

* ``python -m benchmarks``: the ratio benchmark (:mod:`benchmarks.ratio`), nbquant side by
  side with a bandwidth roofline, NumPy and the installed peers;
* ``python -m benchmarks.cuda``: the cuda backend's kernels next to a device-to-device
  copy (:mod:`benchmarks.cuda`, needs a real GPU).

The asv regression suite lives in ``asv_bench/``. ``docs/performance.md`` lists the command lines.
"""
