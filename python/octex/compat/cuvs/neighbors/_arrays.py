"""Host and CUDA arrays in and out of the cuVS drop-in."""

from __future__ import annotations

import numpy as np


class HostArray(np.ndarray):
    """A numpy array with ``copy_to_host()``, the call cuVS scripts make on
    the device arrays cuVS returns (here the results are on the host)."""

    def copy_to_host(self) -> np.ndarray:
        return np.asarray(self).copy()


def to_host(x) -> np.ndarray:
    """``x`` as a numpy array: numpy and array-likes as they are; CUDA arrays
    (``__cuda_array_interface__``, cuVS's ``device_ndarray``, CuPy) copied to
    the host (octex's GPU search copies queries to the device itself)."""
    if hasattr(x, "copy_to_host"):
        return np.asarray(x.copy_to_host())
    if hasattr(x, "__cuda_array_interface__"):
        try:
            import cupy
        except ImportError as e:
            raise TypeError("a CUDA array needs CuPy installed to be read on the host") from e
        return cupy.asnumpy(cupy.asarray(x))
    return np.asarray(x)


def write_out(result: np.ndarray, out):
    """``result`` written into ``out`` (host or CUDA array) when given, else
    ``result`` as a :class:`HostArray`."""
    if out is None:
        return result.view(HostArray)
    if hasattr(out, "__cuda_array_interface__"):
        try:
            import cupy
        except ImportError as e:
            raise TypeError("a CUDA output array needs CuPy installed to be written") from e
        cupy.asarray(out)[...] = cupy.asarray(result)
        return out
    np.asarray(out)[...] = result
    return out
