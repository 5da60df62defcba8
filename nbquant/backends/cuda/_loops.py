"""Device-side loop frames shared by the CUDA kernels: the grid-stride column walk and row coordinates.

Launch shape of the element kernels: the grid is 2-D. ``blockIdx.y`` walks canonical
rows ``(p, r)`` in a grid-stride loop, so the scale row is looked up once per row.
Along the contiguous column axis consecutive threads take consecutive items
(coalesced) in a grid-stride loop. The scale block index ``g = c // bc`` is computed
once per thread; every stride then advances it with precomputed ``stride // bc`` and
``stride % bc`` and one compare (:func:`next_block`), so there is no integer division
per element. All indices are unsigned 64-bit: no 2**31 limit, no sign fix-ups in the
divisions, and no negative-index wraparound code on every array access.

:func:`column_frame` writes that walk once: it builds, by closure over an operation's
device functions, the device function that runs the whole walk, so an element-wise
kernel is its signature and one call (numba freezes a closure's free variables as
compile-time constants and inlines them, as numba-cuda's ufunc templates inline their
core, without generating source). The kernel functions themselves stay written out:
numba-cuda compiles a kernel only with its parameters spelled out (no ``*args``), and a
module-level kernel keeps the on-disk cache as it was (keyed on the kernel's own file,
which holds its operation; a closure kernel would be keyed on its pickled cells too).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

__all__ = ["U0", "U1", "column_frame", "column_walk", "next_block", "row_coords", "rows_of", "team_coords", "team_item",
           "team_keys", "thread_start"]

U0 = np.uint64(0)
U1 = np.uint64(1)


@cuda.jit(device=True, inline="always")
def column_walk(k, bc):
    """This thread's first item and the stride, each with its scale block and offset: ``k`` columns per item.

    Returns ``(start, stride, g_start, o_start, g_step, o_step)``: item ``start`` begins
    at column ``start * k`` in scale block ``g_start`` at offset ``o_start``; a stride
    moves ``g_step`` blocks and ``o_step`` columns further.
    """
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    start = np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x)
    g_step = (stride * k) // bc
    g_start = (start * k) // bc
    return start, stride, g_start, start * k - g_start * bc, g_step, stride * k - g_step * bc


@cuda.jit(device=True, inline="always")
def next_block(g, off, g_step, o_step, bc):
    """The scale block and offset one stride further (no division)."""
    g += g_step
    off += o_step
    if off >= bc:
        off -= bc
        g += U1
    return g, off


@cuda.jit(device=True, inline="always")
def row_coords(row, R, bp, br):
    """The ``(p, r)`` of canonical row ``row`` and its scale row ``(sp, sr)``."""
    p = row // R
    r = row - p * R
    return p, r, p // bp, r // br


@cuda.jit(device=True, inline="always")
def rows_of(a):
    """``(P * R, R)``: the canonical rows of a (P, R, C) array and the rows per ``p``."""
    R = np.uint64(a.shape[1])
    return np.uint64(a.shape[0]) * R, R


@cuda.jit(device=True, inline="always")
def thread_start():
    """This thread's first item and the grid-stride: ``(start, stride)`` along ``blockIdx.x``/``threadIdx.x``."""
    stride = np.uint64(cuda.gridDim.x) * np.uint64(cuda.blockDim.x)
    return np.uint64(cuda.blockIdx.x) * np.uint64(cuda.blockDim.x) + np.uint64(cuda.threadIdx.x), stride


def column_frame(layout, views, item):
    """The walk of an element-wise kernel over (P, R, C) with (bp, br, bc) scale blocks, around one operation.

    The operation is three ``cuda.jit(device=True, inline="always")`` functions over the
    kernel's arguments ``args`` (a tuple: the kernel's parameters less ``bp, br, bc``):

    * ``layout(args) -> (a, items, k)``: the (P, R, C) array ``a`` whose rows are walked,
      the work items per row and the columns per item (``U1`` per element; ``8 // bits``
      for a packed byte, a packed group of float codes);
    * ``views(args, p, r, sp, sr)``: the row views of canonical row ``(p, r)`` and its
      scale row ``(sp, sr)``, read once per row;
    * ``item(args, views, j, k, g, off, bc)``: work item ``j``, which begins at column
      ``j * k`` in scale block ``g`` at offset ``off``.

    Returns ``walk(bp, br, bc, args)``, a device function for the kernel to call.
    """

    @cuda.jit(device=True, inline="always")
    def walk(bp, br, bc, args):
        a, items, k = layout(args)
        rows, R = rows_of(a)
        ubp, ubr, ubc = np.uint64(bp), np.uint64(br), np.uint64(bc)
        start, stride, g_start, o_start, g_step, o_step = column_walk(k, ubc)
        row = np.uint64(cuda.blockIdx.y)
        while row < rows:
            p, r, sp, sr = row_coords(row, R, ubp, ubr)
            here = views(args, p, r, sp, sr)
            j, g, off = start, g_start, o_start
            while j < items:
                item(args, here, j, k, g, off, ubc)
                j += stride
                g, off = next_block(g, off, g_step, o_step, ubc)
            row += np.uint64(cuda.gridDim.y)

    return walk


# Teams: a team of threads (a power of two, at most a warp) per block of a row, for the kernels that reduce a
# block before they write it (dynamic quantize, the block formats). A thread block takes ``blockDim / team``
# items per round; every thread takes part in every round, because the combine has barriers.


@cuda.jit(device=True, inline="always")
def team_coords(team):
    """``(tid, lane, first, teams)``: this thread, its lane in its team, the team's lane 0, teams per thread block."""
    tid = np.uint64(cuda.threadIdx.x)
    lane = tid % team
    return tid, lane, tid - lane, np.uint64(cuda.blockDim.x) // team


@cuda.jit(device=True, inline="always")
def team_item(base, tid, team, total, inner):
    """The item of this thread's team in the round at ``base``, split as ``(item // inner, item % inner, active)``.

    An inactive team (past ``total``) gets item 0 and still takes part in the round's barriers.
    """
    item = base + tid // team
    active = item < total
    outer = item // inner if active else U0
    return outer, item - outer * inner, active


@cuda.jit(device=True, inline="always")
def team_keys(lo, hi, tid, first, team, slo, shi):
    """The min of ``lo`` and max of ``hi`` over the ``team`` lanes from thread ``first`` (a barrier for all).

    Each thread writes its keys to shared memory, then every lane reads its team's (the same
    addresses for a team: broadcast reads, no bank conflicts). The second barrier keeps the
    next round from overwriting keys a slower team is still reading.
    """
    slo[tid] = lo
    shi[tid] = hi
    cuda.syncthreads()
    i = first
    end = first + team
    while i < end:
        lo = min(lo, slo[i])
        hi = max(hi, shi[i])
        i += U1
    cuda.syncthreads()
    return lo, hi
