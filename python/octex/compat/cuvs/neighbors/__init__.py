"""``cuvs.neighbors``'s CAGRA and filters, answered by OctEx."""

from . import cagra, filters

__all__ = ["cagra", "filters"]
