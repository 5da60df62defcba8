"""Straight-through (STE) gradients of modelopt's fake quantizers (:mod:`nbquant.modelopt.ops`).

modelopt's ``FakeTensorQuantFunction.backward`` passes the gradient where ``-amax <= x <= amax``
and zeroes it elsewhere; ``FakeAffineTensorQuantFunction.backward`` does the same inside
``[min_range, max_range]`` (semantics.md §6). Computed in float32 and returned in the gradient's
float dtype (float32 for float64).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .._docstrings import fill_doc
from ..backends import resolve_backend
from ..layout import resolve_layout
from ..placement import placement
from ..validation import check_affine_range
from .ops import DOCS, amax_grid, amax_layout, result_dtype

__all__ = ["fake_tensor_quant_backward", "fake_affine_tensor_quant_backward"]

_DOCS = DOCS | {
    "grad_x": """
        grad_output, x : array_like
            The incoming gradient and the forward input, of one shape.
        """,
    "grad_returns": """
        Returns
        -------
        numpy.ndarray
            The gradient, with ``grad_output``'s float dtype (float32 for float64).
        """,
}


def _grad_pair(grad_output, x):
    """``grad_output`` and ``x`` read where they live (one shape, one placement), and that placement."""
    pg, p = placement(grad_output), placement(x)
    g, x = pg.float_input(grad_output, "grad_output"), p.float_input(x)
    if tuple(g.shape) != tuple(x.shape):
        raise ValueError(f"grad_output has shape {tuple(g.shape)} but x has shape {tuple(x.shape)}; they must match")
    if pg.device != p.device:
        raise TypeError("grad_output and x must both be CUDA device arrays or both host arrays")
    return g, x, p


@fill_doc(**_DOCS)
def fake_tensor_quant_backward(grad_output: npt.ArrayLike, x: npt.ArrayLike, amax: npt.ArrayLike, *,
                               axis: int | None = None, block_size=None, backend: str | None = None) -> np.ndarray:
    """Return the straight-through gradient with clipping: ``grad where -amax <= x <= amax else 0``.

    The endpoints pass; NaN inputs get gradient 0.

    Parameters
    ----------
    {grad_x}
    amax : array_like
        The clipping range(s), as in :func:`fake_tensor_quant`.
    {granularity}
    {backend}

    {grad_returns}

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.modelopt import fake_tensor_quant_backward
    >>> fake_tensor_quant_backward(np.ones(4, np.float32), np.array([-2.0, -1.0, 0.5, 1.5], np.float32), 1.0)
    array([0., 1., 1., 0.], dtype=float32)
    """
    g, x, p = _grad_pair(grad_output, x)
    layout = amax_layout(x, amax, axis, block_size)
    grid = amax_grid(x, amax, layout, p, backend)
    out = p.result(tuple(x.shape), result_dtype(g))
    if x.size:
        resolve_backend(backend, p).ste_backward(g, x, -grid, grid, layout, out)
    return out


@fill_doc(**_DOCS)
def fake_affine_tensor_quant_backward(grad_output: npt.ArrayLike, x: npt.ArrayLike, min_range: float,
                                      max_range: float, *, backend: str | None = None) -> np.ndarray:
    """Return FakeAffine's straight-through gradient: ``grad where min_range <= x <= max_range else 0``.

    Parameters
    ----------
    {grad_x}
    min_range, max_range : float
        The range of :func:`fake_affine_tensor_quant`.
    {backend}

    {grad_returns}

    Examples
    --------
    >>> import numpy as np
    >>> from nbquant.modelopt import fake_affine_tensor_quant_backward
    >>> fake_affine_tensor_quant_backward(np.ones(3, np.float32), np.array([-2.0, 0.0, 2.0], np.float32), -1.0, 2.0)
    array([0., 1., 1.], dtype=float32)
    """
    g, x, p = _grad_pair(grad_output, x)
    lo, hi = check_affine_range(min_range, max_range)
    layout = resolve_layout(tuple(x.shape))
    out = p.result(tuple(x.shape), result_dtype(g))
    if x.size:
        resolve_backend(backend, p).ste_backward(
            g, x, np.full(layout.grid, lo, np.float32), np.full(layout.grid, hi, np.float32), layout, out)
    return out
