"""The last part of ``nbquant demo``: ``nbquant convert`` on small synthetic models (a safetensors checkpoint, a GGUF).

The models are fixed (:data:`DEMO_CHECKPOINT`, :data:`GGUF_MODEL`) so that the part runs in a few
seconds and compiles few kernels; :mod:`nbquant.cli` prints what they give.

Examples
--------
>>> from nbquant.demo.convert import DEMO_CHECKPOINT, GGUF_SCHEME
>>> DEMO_CHECKPOINT["layers"], GGUF_SCHEME
(2, 'Q8_0')
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the GGUF job is imported by gguf_step only
    from nbquant.convert.gguf import GGUFReport

__all__ = ["DEMO_CHECKPOINT", "GGUF_MODEL", "GGUF_SCHEME", "gguf_step"]

#: The demo's checkpoint (:func:`nbquant.convert.write_synthetic_checkpoint`): float32 (the kernels it runs are the
#: ones the demo's table compiled, but the amax reduction), 2 layers, 5 MiB in 4 shards.
DEMO_CHECKPOINT = {"hidden": 256, "intermediate": 512, "layers": 2, "vocab": 512, "shard_bytes": 1 << 20,
                   "dtype": "float32"}
#: The demo's GGUF model (:func:`nbquant.convert.gguf.write_synthetic_gguf`): Llama-shaped, BF16, 2 layers, 2.3 MiB.
GGUF_MODEL = {"hidden": 256, "intermediate": 512, "layers": 2, "vocab": 512}
#: The scheme of the demo's GGUF step: Q8_0, whose two kernels (quantize, and dequantize for the SQNR) compile
#: in a few seconds cold; Q4_K_M's Q4_K and Q6_K kernels take about a minute cold (docs/convert.md).
GGUF_SCHEME = "Q8_0"


def gguf_step(folder: str, scheme: str = GGUF_SCHEME) -> GGUFReport:
    """Write the demo's GGUF model (:data:`GGUF_MODEL`) into ``folder`` and convert it with ``scheme``.

    Parameters
    ----------
    folder : str
        An existing folder; ``model-BF16.gguf`` and ``model-{scheme}.gguf`` are written there.
    scheme : str
        A llama-quantize scheme (:data:`nbquant.gguf.policy.SCHEMES`).

    Returns
    -------
    nbquant.convert.gguf.GGUFReport
        The conversion's report (each tensor's type, why, SQNR, bytes).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     report = gguf_step(d)
    >>> sorted({t.target for t in report.tensors})
    ['F32', 'Q8_0']
    """
    from nbquant.convert.gguf import convert_gguf, write_synthetic_gguf

    src = write_synthetic_gguf(os.path.join(folder, "model-BF16.gguf"), **GGUF_MODEL)
    return convert_gguf(src, os.path.join(folder, f"model-{scheme}.gguf"), scheme, progress=False)

