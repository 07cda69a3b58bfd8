"""A drop-in for code written for cuVS's CAGRA: change one import.

    from octex.compat.cuvs.neighbors import cagra, filters   # was: from cuvs.neighbors import ...
    index = cagra.build(cagra.IndexParams(metric="sqeuclidean"), dataset)
    distances, neighbors = cagra.search(cagra.SearchParams(), index, queries, k,
                                        filter=filters.from_bitset(bitset))

See :mod:`octex.compat.cuvs.neighbors.cagra` for what maps to what.
"""

from . import neighbors

__all__ = ["neighbors"]
