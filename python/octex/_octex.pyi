"""Type stubs of the Rust extension module (see ``octex/__init__.py``)."""

from os import PathLike
from typing import Callable, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

class SearchParams:
    read_depth: int
    start_points: int
    waves: int
    rerank: int
    wave_rerank: bool
    def __init__(self, read_depth: Optional[int] = None, start_points: Optional[int] = None, waves: Optional[int] = None, rerank: Optional[int] = None, wave_rerank: Optional[bool] = None) -> None: ...

class Index:
    @staticmethod
    def load(path: Union[str, PathLike]) -> Index: ...
    def save(self, path: Union[str, PathLike]) -> None: ...
    def __len__(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def metric(self) -> str: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def default_params(self) -> SearchParams: ...
    def params_for_recall(self, recall: float, k: int = 10) -> Tuple[SearchParams, float]: ...
    def search(
        self,
        queries: npt.NDArray[np.float32],
        k: int = 10,
        params: Optional[SearchParams] = None,
        recall: Optional[float] = None,
        backend: str = "auto",
        allowed: Optional[npt.NDArray[np.uint32]] = None,
    ) -> Tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]]: ...
    @property
    def is_live(self) -> bool: ...
    def add(self, vectors: npt.NDArray[np.float32], ids: Optional[npt.NDArray[np.uint64]] = None) -> npt.NDArray[np.uint64]: ...
    def remove(self, ids: npt.NDArray[np.uint64]) -> int: ...
    def flush(self) -> None: ...
    def reconstruct(self, ids: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]: ...
    def ids(self) -> npt.NDArray[np.uint64]: ...
    def search_live(
        self,
        queries: npt.NDArray[np.float32],
        k: int = 10,
        params: Optional[SearchParams] = None,
        recall: Optional[float] = None,
        allowed: Optional[npt.NDArray[np.uint64]] = None,
    ) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]: ...

def build(
    base: npt.NDArray[np.float32],
    metric: str = "l2",
    backend: str = "auto",
    copies: Optional[int] = None,
    list_len: Optional[int] = None,
    row_len: Optional[int] = None,
    sketch_width: Optional[int] = None,
    vectors: str = "f16",
    seed: Optional[int] = None,
    progress: Optional[Callable[[str, str, int], None]] = None,
    ids: Optional[npt.NDArray[np.uint64]] = None,
) -> Index: ...
def knn(
    queries: npt.NDArray[np.float32], base: npt.NDArray[np.float32], k: int, metric: str = "l2"
) -> Tuple[npt.NDArray[np.uint32], npt.NDArray[np.float32]]: ...
def gpu_available() -> bool: ...

class ShardedIndex:
    @staticmethod
    def build(base: npt.NDArray[np.float32], metric: str = "l2", shards: int = 2, seed: Optional[int] = None) -> ShardedIndex: ...
    @staticmethod
    def load(path: Union[str, PathLike]) -> ShardedIndex: ...
    def save(self, path: Union[str, PathLike]) -> None: ...
    def __len__(self) -> int: ...
    @property
    def manifest(self) -> str: ...
    def search(
        self,
        queries: npt.NDArray[np.float32],
        k: int = 10,
        params: Optional[SearchParams] = None,
        backend: str = "auto",
    ) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]: ...

def merge_topk(
    ids: list, distances: list, k: int, descending: bool = False
) -> Tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]: ...
