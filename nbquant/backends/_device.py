"""The CUDA-array predicate and stream selection the cuda backend reads, owned by :mod:`nbquant.placement`.

:func:`is_device_array` recognises CUDA arrays of any producer; :func:`use_cuda_stream`
sets the stream the ``cuda`` backend queues its work on (read with :func:`selected_stream`).
Both live on the ground floor (:mod:`nbquant.placement`, which decides where a call runs);
this module names them for the backend packages.
"""

from __future__ import annotations

from ..placement import is_device_array, selected_stream, use_cuda_stream

__all__ = ["is_device_array", "use_cuda_stream", "selected_stream"]
