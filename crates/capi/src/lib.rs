//! # octex-capi
//!
//! The C API of OctEx, for programs in C, C++ or any language with a C FFI.
//! `include/octex.h` is generated from this file by cbindgen (a test checks
//! that the committed copy is current). It wraps `octex-build` and
//! `octex-search` and adds nothing to them:
//!
//! - opaque handles (`OctexIndex`) created by `octex_build` / `octex_load`
//!   and released by `octex_free`;
//! - every call returns an `OctexStatus`; on failure `octex_last_error()`
//!   gives the message (per thread, valid until the thread's next call);
//! - vectors in and results out are DLPack `DLTensor`s: 2-d, row-major
//!   (strides null or compact), `float32` in, `uint32` ids and `float32`
//!   distances out, in host memory (`kDLCPU`, `kDLCUDAHost`) or, with the
//!   `gpu` feature, in CUDA device memory (`kDLCUDA`: copied to the host and
//!   back, said in the docs of `octex_search`).
//!
//! Adds, removes and user ids (`octex_add`, `octex_remove`,
//! `octex_search_ids`, in `live.rs`) take plain `uint64_t` arrays.
//!
//! Place in the pipeline: beside the Python package, on top of the Rust API.
//! Host tensors are read in place (no copy). No Rust panic crosses the boundary: each entry point catches it and
//! returns `OCTEX_STATUS_INTERNAL`.

use std::borrow::Cow;
use std::cell::RefCell;
use std::ffi::{c_char, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use octex_build::BuildParams;
use octex_index::Metric;
use octex_search::{Backend, Index, Queries, SearchError, SearchParams, SharedIndex};

mod live;
pub use live::{octex_add, octex_remove, octex_search_bitset, octex_search_ids};
mod shards;
pub use shards::octex_merge_topk;

/// The result of every call.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OctexStatus {
    Ok = 0,
    /// A bad argument: null pointer, wrong shape or dtype, NaN, `k` too
    /// large, unknown metric or backend, parameters out of range.
    InvalidArgument = 1,
    /// A file could not be read or written, or is not a valid index.
    Io = 2,
    /// The GPU was asked for and is missing, or failed.
    Gpu = 3,
    /// A bug: a panic inside octex (please report it).
    Internal = 4,
}

/// Search parameters (the paper's `r`, `S`, `W`, `R`, and whether the rerank
/// runs in every wave); `octex_search_params_default()` gives the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OctexSearchParams {
    pub read_depth: usize,
    pub start_points: usize,
    pub waves: usize,
    pub rerank: usize,
    pub wave_rerank: bool,
}

impl From<OctexSearchParams> for SearchParams {
    fn from(p: OctexSearchParams) -> Self {
        SearchParams {
            read_depth: p.read_depth,
            start_points: p.start_points,
            waves: p.waves,
            rerank: p.rerank,
            wave_rerank: p.wave_rerank,
        }
    }
}

impl From<SearchParams> for OctexSearchParams {
    fn from(p: SearchParams) -> Self {
        OctexSearchParams {
            read_depth: p.read_depth,
            start_points: p.start_points,
            waves: p.waves,
            rerank: p.rerank,
            wave_rerank: p.wave_rerank,
        }
    }
}

/// An index and, after a first GPU search, its GPU searcher (octex-search's
/// `SharedIndex`, the handle the Python binding holds too).
pub struct OctexIndex {
    shared: SharedIndex,
    /// From the first add or remove on: the index with its adds, removes
    /// and user ids (searched by `octex_search_ids`, on the CPU).
    live: Option<octex_build::LiveIndex>,
}

impl OctexIndex {
    fn new(index: Index) -> Self {
        OctexIndex {
            shared: SharedIndex::new(index),
            live: None,
        }
    }

    /// The index searches run on: the living one after adds or removes.
    fn current(&self) -> &Index {
        match &self.live {
            Some(live) => live.index(),
            None => self.shared.index(),
        }
    }
}

/// DLPack's device (see the header).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

/// DLPack's data type (see the header).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// DLPack's tensor (see the header).
#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

const DL_CPU: i32 = 1;
const DL_CUDA: i32 = 2;
const DL_CUDA_HOST: i32 = 3;
const DL_UINT: u8 = 1;
const DL_FLOAT: u8 = 2;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

struct Failure(OctexStatus, String);

type Outcome = Result<(), Failure>;

fn invalid(msg: impl Into<String>) -> Failure {
    Failure(OctexStatus::InvalidArgument, msg.into())
}

impl From<SearchError> for Failure {
    fn from(e: SearchError) -> Self {
        let status = match &e {
            SearchError::Index(_) => OctexStatus::Io,
            SearchError::BackendUnavailable(_) => OctexStatus::Gpu,
            #[cfg(feature = "gpu")]
            SearchError::Gpu(_) => OctexStatus::Gpu,
            _ => OctexStatus::InvalidArgument,
        };
        Failure(status, e.to_string())
    }
}

impl From<octex_index::IndexError> for Failure {
    fn from(e: octex_index::IndexError) -> Self {
        Failure(OctexStatus::Io, e.to_string())
    }
}

impl From<octex_build::BuildError> for Failure {
    fn from(e: octex_build::BuildError) -> Self {
        match e {
            octex_build::BuildError::Search { source, .. } => source.into(),
            octex_build::BuildError::Index(e) => e.into(),
            e => Failure(OctexStatus::InvalidArgument, e.to_string()),
        }
    }
}

/// Run `f`, record its error message for `octex_last_error`, never unwind.
fn guard(f: impl FnOnce() -> Outcome) -> OctexStatus {
    let (status, msg) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => (OctexStatus::Ok, String::new()),
        Ok(Err(Failure(s, m))) => (s, m),
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            (
                OctexStatus::Internal,
                format!("internal error (a bug): {what}"),
            )
        }
    };
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
    status
}

/// # Safety
/// `s` is null or a NUL-terminated string.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if s.is_null() {
        return Err(invalid(format!("{what} is null")));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| invalid(format!("{what} is not UTF-8")))
}

/// A 2-d row-major tensor's (rows, cols) and the byte address of its data.
///
/// # Safety
/// `t` is null or a valid DLTensor whose `shape` (and `strides`, when not
/// null) point to `ndim` values.
unsafe fn matrix(
    t: *const DLTensor,
    code: u8,
    what: &str,
) -> Result<(usize, usize, *mut u8, i32, i32), Failure> {
    // SAFETY: the caller's contract.
    let t = unsafe { t.as_ref() }.ok_or_else(|| invalid(format!("{what} is null")))?;
    if t.ndim != 2 || t.shape.is_null() {
        return Err(invalid(format!(
            "{what} must be 2-d (rows, dim), has {} dimensions",
            t.ndim
        )));
    }
    // SAFETY: shape holds ndim = 2 values.
    let shape = unsafe { std::slice::from_raw_parts(t.shape, 2) };
    if shape[0] < 0 || shape[1] < 0 {
        return Err(invalid(format!("{what} has a negative shape")));
    }
    let (rows, cols) = (shape[0] as usize, shape[1] as usize);
    if !t.strides.is_null() {
        // SAFETY: strides holds ndim = 2 values when not null.
        let st = unsafe { std::slice::from_raw_parts(t.strides, 2) };
        if (cols > 1 && st[1] != 1) || (rows > 1 && st[0] != cols as i64) {
            return Err(invalid(format!(
                "{what} must be row-major and compact (strides {st:?})"
            )));
        }
    }
    if t.dtype.code != code || t.dtype.bits != 32 || t.dtype.lanes != 1 {
        let want = if code == DL_FLOAT {
            "float32"
        } else {
            "uint32"
        };
        return Err(invalid(format!("{what} must be {want}")));
    }
    if t.data.is_null() && rows * cols > 0 {
        return Err(invalid(format!("{what} has no data")));
    }
    // SAFETY: byte_offset lies inside the tensor's allocation (DLPack).
    let data = unsafe { (t.data as *mut u8).add(t.byte_offset as usize) };
    if data as usize % 4 != 0 {
        return Err(invalid(format!("{what} is not 4-byte aligned")));
    }
    Ok((rows, cols, data, t.device.device_type, t.device.device_id))
}

/// The tensor's `f32` values on the host (borrowed, or copied from a CUDA
/// device).
///
/// # Safety
/// As [`matrix`]; the data holds `rows x cols` values on its device.
unsafe fn read_f32<'a>(
    t: *const DLTensor,
    what: &str,
    shared: Option<&SharedIndex>,
) -> Result<(Cow<'a, [f32]>, usize), Failure> {
    // SAFETY: the caller's contract.
    let (rows, cols, data, dev, id) = unsafe { matrix(t, DL_FLOAT, what) }?;
    let n = rows * cols;
    match dev {
        // SAFETY: host memory of rows x cols f32 (DLPack).
        DL_CPU | DL_CUDA_HOST => Ok((
            Cow::Borrowed(unsafe { std::slice::from_raw_parts(data as *const f32, n) }),
            cols,
        )),
        DL_CUDA => {
            let mut v = vec![0f32; n];
            // SAFETY: device memory of rows x cols f32 (DLPack).
            unsafe { device_copy(shared, id, data as u64, bytes_of_mut(&mut v), true) }?;
            Ok((Cow::Owned(v), cols))
        }
        other => Err(invalid(format!(
            "{what}: device type {other} is not supported (CPU, CUDA host or CUDA)"
        ))),
    }
}

/// A 1-d `uint32` tensor's values (a bitset's words), from host or CUDA
/// device memory.
///
/// # Safety
/// `t` is null or a valid DLTensor whose data holds its shape's values.
unsafe fn read_words<'a>(
    t: *const DLTensor,
    what: &str,
    shared: &SharedIndex,
) -> Result<Cow<'a, [u32]>, Failure> {
    // SAFETY: the caller's contract.
    let t = unsafe { t.as_ref() }.ok_or_else(|| invalid(format!("{what} is null")))?;
    if t.ndim != 1 || t.shape.is_null() {
        return Err(invalid(format!(
            "{what} must be 1-d, has {} dimensions",
            t.ndim
        )));
    }
    // SAFETY: shape holds ndim = 1 value; strides, when not null, too.
    let (len, stride) = unsafe { (*t.shape, (!t.strides.is_null()).then(|| *t.strides)) };
    if len < 0 || stride.is_some_and(|s| s != 1 && len > 1) {
        return Err(invalid(format!(
            "{what} must be compact with a length >= 0"
        )));
    }
    if t.dtype.code != DL_UINT || t.dtype.bits != 32 || t.dtype.lanes != 1 {
        return Err(invalid(format!("{what} must be uint32")));
    }
    let n = len as usize;
    if n == 0 {
        return Ok(Cow::Owned(Vec::new()));
    }
    if t.data.is_null() {
        return Err(invalid(format!("{what} has no data")));
    }
    // SAFETY: byte_offset lies inside the tensor's allocation (DLPack).
    let data = unsafe { (t.data as *const u8).add(t.byte_offset as usize) };
    if data as usize % 4 != 0 {
        return Err(invalid(format!("{what} is not 4-byte aligned")));
    }
    match t.device.device_type {
        // SAFETY: host memory of n u32 (DLPack), 4-byte aligned (checked).
        DL_CPU | DL_CUDA_HOST => Ok(Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(data as *const u32, n)
        })),
        DL_CUDA => {
            let mut v = vec![0u32; n];
            // SAFETY: device memory of n u32 (DLPack).
            unsafe {
                device_copy(
                    Some(shared),
                    t.device.device_id,
                    data as u64,
                    bytes_of_mut(&mut v),
                    true,
                )
            }?;
            Ok(Cow::Owned(v))
        }
        other => Err(invalid(format!(
            "{what}: device type {other} is not supported (CPU, CUDA host or CUDA)"
        ))),
    }
}

/// Write `values` into the tensor (host or CUDA device memory).
///
/// # Safety
/// As [`matrix`]; the data holds `rows x cols` writable values.
unsafe fn write<T: Copy>(
    t: *mut DLTensor,
    code: u8,
    values: &[T],
    rows: usize,
    cols: usize,
    what: &str,
    shared: &SharedIndex,
) -> Outcome {
    // SAFETY: the caller's contract.
    let (r, c, data, dev, id) = unsafe { matrix(t, code, what) }?;
    if (r, c) != (rows, cols) {
        return Err(invalid(format!(
            "{what} must be ({rows}, {cols}), is ({r}, {c})"
        )));
    }
    // SAFETY: T is u32 or f32, plain old data.
    let bytes = unsafe {
        std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
    };
    match dev {
        DL_CPU | DL_CUDA_HOST => {
            // SAFETY: host memory of rows x cols 4-byte values, not aliased by `values`.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), data, bytes.len()) };
            Ok(())
        }
        // SAFETY: device memory of rows x cols 4-byte values.
        DL_CUDA => unsafe {
            device_copy(Some(shared), id, data as u64, &mut bytes.to_vec(), false)
        },
        other => Err(invalid(format!(
            "{what}: device type {other} is not supported"
        ))),
    }
}

/// Values every bit pattern of which is valid, without padding.
trait Plain: Copy {}
impl Plain for f32 {}
impl Plain for u32 {}

fn bytes_of_mut<T: Plain>(v: &mut [T]) -> &mut [u8] {
    // SAFETY: `Plain` types (f32, u32) have no invalid bit patterns and no
    // padding.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(v)) }
}

/// Copy between host `buf` and device address `addr` of CUDA device `id`
/// (`to_host`: device to host), on the index's context of that device
/// ([`SharedIndex::with_device`]), or (a build's input, before there is an
/// index) on one opened for the copy.
///
/// # Safety
/// `addr .. addr + buf.len()` is live device memory of device `id`.
#[cfg(feature = "gpu")]
unsafe fn device_copy(
    shared: Option<&SharedIndex>,
    id: i32,
    addr: u64,
    buf: &mut [u8],
    to_host: bool,
) -> Outcome {
    let gpu_failure = |e: String| Failure(OctexStatus::Gpu, e);
    let mut copy = |gpu: &octex_kernels::Gpu| {
        // SAFETY: the caller's contract.
        unsafe {
            if to_host {
                gpu.copy_from_device_address(addr, buf)
            } else {
                gpu.copy_to_device_address(buf, addr)
            }
        }
        .map_err(|e| gpu_failure(e.to_string()))
    };
    let ordinal = id.max(0) as usize;
    match shared {
        Some(s) => s
            .with_device(ordinal, copy)
            .map_err(|e| gpu_failure(e.to_string()))?,
        None => copy(&octex_kernels::Gpu::open(ordinal).map_err(|e| gpu_failure(e.to_string()))?),
    }
}

/// Without the `gpu` feature there is no device to copy from: an error.
///
/// # Safety
/// None needed (nothing is read or written); `unsafe` only to match the
/// `gpu` version's signature.
#[cfg(not(feature = "gpu"))]
unsafe fn device_copy(_: Option<&SharedIndex>, _: i32, _: u64, _: &mut [u8], _: bool) -> Outcome {
    Err(Failure(
        OctexStatus::Gpu,
        "CUDA tensors need octex-capi's `gpu` feature".into(),
    ))
}

/// The fixed default search parameters (`SearchParams::default()`); a search
/// given null parameters takes its index's own (`octex_default_params`).
#[no_mangle]
pub extern "C" fn octex_search_params_default() -> OctexSearchParams {
    SearchParams::default().into()
}

/// The parameters a search of `index` given null parameters takes: the
/// point its build chose (the fixed defaults, deepened where the index's own
/// sample needs it), or `octex_search_params_default()` for an index saved
/// before builds chose one.
///
/// # Safety
/// `index` is null or a live index; `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn octex_default_params(
    index: *const OctexIndex,
    out: *mut OctexSearchParams,
) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_ref() }.ok_or_else(|| invalid("index is null"))?;
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        // SAFETY: `out` is valid (checked non-null; the caller's contract).
        unsafe { *out = ix.current().default_params().into() };
        Ok(())
    })
}

/// The message of this thread's last failed call ("" after a success).
/// Valid until this thread's next octex call.
#[no_mangle]
pub extern "C" fn octex_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// 1 when a GPU can be used (built with the `gpu` feature, a CUDA driver
/// reports a device), else 0.
#[no_mangle]
pub extern "C" fn octex_gpu_available() -> i32 {
    octex_search::gpu_available() as i32
}

/// Build an index over `base` (`float32`, `(n, dim)`). `metric`: "l2",
/// "cosine" or "ip"; `backend`: "auto", "cpu" or "gpu" (null: "auto").
/// On success `*out` holds a new index (free it with `octex_free`).
///
/// # Safety
/// `base` is a valid DLTensor (or null); `metric` and `backend` are null or
/// NUL-terminated; `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn octex_build(
    base: *const DLTensor,
    metric: *const c_char,
    backend: *const c_char,
    out: *mut *mut OctexIndex,
) -> OctexStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        // SAFETY: the caller's contract.
        let metric: Metric = unsafe { text(metric, "metric") }?
            .parse()
            .map_err(|e: String| invalid(e))?;
        let backend = parse_backend(backend)?;
        // SAFETY: the caller's contract.
        let (values, dim) = unsafe { read_f32(base, "base", None) }?;
        let params = BuildParams {
            backend,
            ..Default::default()
        };
        let built = octex_build::build(&values, dim, metric, &params)?;
        let index = Box::new(OctexIndex::new(Index::new(built.index)));
        // SAFETY: `out` is valid (checked non-null; the caller's contract).
        unsafe { *out = Box::into_raw(index) };
        Ok(())
    })
}

/// `params`, or when null the index's own defaults
/// ([`Index::default_params`]).
///
/// # Safety
/// `params` is null or valid.
unsafe fn params_or_default(params: *const OctexSearchParams, index: &Index) -> SearchParams {
    // SAFETY: the caller's contract.
    match unsafe { params.as_ref() } {
        Some(p) => SearchParams::from(*p),
        None => index.default_params(),
    }
}

fn parse_backend(backend: *const c_char) -> Result<Backend, Failure> {
    if backend.is_null() {
        return Ok(Backend::Auto);
    }
    // SAFETY: non-null, NUL-terminated (the callers' contract).
    unsafe { text(backend, "backend") }?
        .parse()
        .map_err(|e: String| invalid(e))
}

/// Load and validate an index file, plain or saved after adds and removes
/// (then searched by `octex_search_ids`, as before the save). On success
/// `*out` holds a new index.
///
/// # Safety
/// `path` is NUL-terminated; `out` is a valid pointer.
#[no_mangle]
pub unsafe extern "C" fn octex_load(path: *const c_char, out: *mut *mut OctexIndex) -> OctexStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out is null"));
        }
        // SAFETY: the caller's contract.
        let path = unsafe { text(path, "path") }?;
        let live = octex_build::LiveIndex::load(path.as_ref(), Default::default())
            .map_err(live::failure)?;
        let mut index = Box::new(OctexIndex::new(live.index().clone()));
        if !live.ids_are_positions() {
            index.live = Some(live);
        }
        // SAFETY: `out` is valid.
        unsafe { *out = Box::into_raw(index) };
        Ok(())
    })
}

/// Write the index to `path` atomically: a crash during the save leaves the
/// previous file whole. After adds and removes the file keeps the user ids
/// and removals, and `octex_load` gives back the same answers; when half the
/// built vectors or more are removed, the index is rebuilt over the live ones
/// first.
///
/// # Safety
/// `index` comes from `octex_build`/`octex_load`, is not freed and not used
/// by another thread during the call; `path` is NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn octex_save(index: *mut OctexIndex, path: *const c_char) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_mut() }.ok_or_else(|| invalid("index is null"))?;
        // SAFETY: the caller's contract.
        let path = unsafe { text(path, "path") }?;
        match &mut ix.live {
            Some(live) => live.save(path.as_ref()).map_err(live::failure)?,
            None => ix.shared.index().raw().save(path)?,
        }
        Ok(())
    })
}

/// Live vectors in the index: built or added, not removed (0 for null).
///
/// # Safety
/// `index` is null or a live index.
#[no_mangle]
pub unsafe extern "C" fn octex_len(index: *const OctexIndex) -> usize {
    // SAFETY: the caller's contract.
    unsafe { index.as_ref() }.map_or(0, |i| match &i.live {
        Some(live) => live.len(),
        None => i.shared.index().len(),
    })
}

/// Dimension of the vectors the index takes (0 for null).
///
/// # Safety
/// `index` is null or a live index.
#[no_mangle]
pub unsafe extern "C" fn octex_dim(index: *const OctexIndex) -> usize {
    // SAFETY: the caller's contract.
    unsafe { index.as_ref() }.map_or(0, |i| i.shared.index().dim())
}

/// Search `queries` (`float32`, `(nq, dim)`) for the `k` nearest of each:
/// `ids` (`uint32`, `(nq, k)`, missing entries `UINT32_MAX`) and `distances`
/// (`float32`, `(nq, k)`) are written. `params` null: the defaults.
/// `backend`: "auto", "cpu", "gpu" or null ("auto"); the GPU searcher is
/// kept in the index for later calls. One thread at a time per index.
///
/// # Safety
/// `index` is a live index not used by another thread during the call; the
/// tensors are valid DLTensors; `params` is null or valid; `backend` is null
/// or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn octex_search(
    index: *mut OctexIndex,
    queries: *const DLTensor,
    k: usize,
    params: *const OctexSearchParams,
    backend: *const c_char,
    ids: *mut DLTensor,
    distances: *mut DLTensor,
) -> OctexStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let ix = unsafe { index.as_mut() }.ok_or_else(|| invalid("index is null"))?;
        // SAFETY: the caller's contract.
        let p = unsafe { params_or_default(params, ix.shared.index()) };
        if ix.live.is_some() {
            return Err(invalid(
                "an index with adds or removes is searched by octex_search_ids (user ids)",
            ));
        }
        let backend = parse_backend(backend)?.resolve()?;
        // SAFETY: the caller's contract.
        let (values, dim) = unsafe { read_f32(queries, "queries", Some(&ix.shared)) }?;
        let batch = Queries::new(&values, dim)?;
        let nq = batch.len();
        let res = ix.shared.search(batch, k, &p, backend)?;
        // SAFETY: the caller's contract.
        unsafe { write(ids, DL_UINT, &res.ids, nq, k, "ids", &ix.shared) }?;
        // SAFETY: the caller's contract.
        unsafe {
            write(
                distances,
                DL_FLOAT,
                &res.distances,
                nq,
                k,
                "distances",
                &ix.shared,
            )
        }
    })
}

/// Release an index (null: nothing).
///
/// # Safety
/// `index` is null or comes from `octex_build`/`octex_load` and is not used
/// again.
#[no_mangle]
pub unsafe extern "C" fn octex_free(index: *mut OctexIndex) {
    if !index.is_null() {
        // SAFETY: the caller's contract: a Box from this library, freed once.
        drop(unsafe { Box::from_raw(index) });
    }
}

#[cfg(test)]
mod tests {
    /// The committed header is what cbindgen makes of this crate now.
    #[test]
    fn header_is_current() {
        let fresh = include_str!(concat!(env!("OUT_DIR"), "/octex.h"));
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/include/octex.h");
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        if fresh != committed {
            if std::env::var("OCTEX_UPDATE_HEADER").as_deref() == Ok("1") {
                std::fs::write(path, fresh).expect("write the header");
                return;
            }
            panic!("crates/capi/include/octex.h is stale: run `OCTEX_UPDATE_HEADER=1 cargo test -p octex-capi header` and commit it");
        }
    }
}
