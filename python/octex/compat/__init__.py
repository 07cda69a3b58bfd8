"""Drop-ins for code written for other libraries (see :mod:`octex.compat.faiss`)."""
