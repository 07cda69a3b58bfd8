//! Linear-algebra launchers, as methods of [`Gpu`]: the cuBLAS products and
//! the small kernels around them (bias subtraction, row norms, the running
//! top-k of a tile of dot products).

use cudarc::cublas::{sys as blas_sys, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, PushKernelArg};

use crate::layout::{BLOCK_THREADS, MAX_TOPK};
use crate::{blocks_for, cfg, Gpu, GpuError};

/// Candidates `topk_tile` sorts at most (its shared memory).
const TOPK_CANDIDATES: usize = 2048;

impl Gpu {
    /// Row-major `c (n x k) = a (n x d, row stride lda) * b (d x k, row stride ldb)`,
    /// `c` with row stride `ldc`.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        a: &CudaView<f32>,
        lda: usize,
        b: &CudaView<f32>,
        ldb: usize,
        c: &mut CudaViewMut<f32>,
        ldc: usize,
        (n, d, k): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        // Row-major C = A B is column-major C^T = B^T A^T.
        let g = GemmConfig {
            transa: blas_sys::cublasOperation_t::CUBLAS_OP_N,
            transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
            m: k as i32,
            n: n as i32,
            k: d as i32,
            alpha: 1.0f32,
            lda: ldb as i32,
            ldb: lda as i32,
            beta: 0.0f32,
            ldc: ldc as i32,
        };
        // SAFETY: the shapes and strides describe buffers of at least these sizes
        // (checked by the callers' constructors).
        unsafe { self.blas.gemm(g, b, a, c) }?;
        Ok(())
    }

    /// Row-major `c (nq x nt) = q (nq x d) * x^T` for `x` (`nt x d`), `c` dense.
    pub fn matmul_transposed(
        &self,
        q: &CudaView<f32>,
        x: &CudaView<f32>,
        c: &mut CudaViewMut<f32>,
        (nq, nt, d): (usize, usize, usize),
    ) -> Result<(), GpuError> {
        // Column-major: C^T (nt x nq) = X (as d x nt)^T * Q^T (d x nq).
        let g = GemmConfig {
            transa: blas_sys::cublasOperation_t::CUBLAS_OP_T,
            transb: blas_sys::cublasOperation_t::CUBLAS_OP_N,
            m: nt as i32,
            n: nq as i32,
            k: d as i32,
            alpha: 1.0f32,
            lda: d as i32,
            ldb: d as i32,
            beta: 0.0f32,
            ldc: nt as i32,
        };
        // SAFETY: as in `matmul`.
        unsafe { self.blas.gemm(g, x, q, c) }?;
        Ok(())
    }

    /// `x[i][j] -= bias[j]` for `n x m` row-major `x`.
    pub fn sub_bias(
        &self,
        x: &mut CudaViewMut<f32>,
        n: usize,
        bias: &CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let m = bias.len();
        assert!(x.len() >= n * m);
        let (n32, m32) = (n as u32, m as u32);
        let mut b = self.stream.launch_builder(&self.sub_bias);
        b.arg(x).arg(&n32).arg(&m32).arg(bias);
        // SAFETY: the kernel touches n * m values of x and m of bias.
        unsafe { b.launch(cfg(blocks_for((n * m) as u64)?, 0)) }?;
        Ok(())
    }

    /// `out[i][j] = x[i][j] - bias[j]` for `n x m` row-major `x` and `out`.
    pub fn sub_bias_into(
        &self,
        x: &CudaView<f32>,
        out: &mut CudaViewMut<f32>,
        n: usize,
        bias: &CudaSlice<f32>,
    ) -> Result<(), GpuError> {
        let m = bias.len();
        assert!(x.len() >= n * m && out.len() >= n * m);
        let (n32, m32) = (n as u32, m as u32);
        let mut b = self.stream.launch_builder(&self.sub_bias_into);
        b.arg(x).arg(out).arg(&n32).arg(&m32).arg(bias);
        // SAFETY: the kernel reads n * m values of x and m of bias, and writes
        // n * m of out.
        unsafe { b.launch(cfg(blocks_for((n * m) as u64)?, 0)) }?;
        Ok(())
    }

    /// `out[i] = |x_i|^2` for `n x d` row-major `x`.
    pub fn row_sq_norms(
        &self,
        x: &CudaView<f32>,
        n: usize,
        d: usize,
        out: &mut CudaViewMut<f32>,
    ) -> Result<(), GpuError> {
        assert!(x.len() >= n * d && out.len() >= n);
        let (n32, d32) = (n as u32, d as u32);
        let mut b = self.stream.launch_builder(&self.row_sq_norms);
        b.arg(x).arg(&n32).arg(&d32).arg(out);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(blocks_for(n as u64)?, 0)) }?;
        Ok(())
    }

    /// Merge the tile `dots` (`nq x nt`, row-major; ids `tile_base..`) into the
    /// running top-`k` lists `best` (`nq x k`, start at `u64::MAX`); scores are
    /// `norms[t] - 2 dots[q][t]`; `self_base` (or `u32::MAX`) names the id of
    /// query 0 to skip.
    #[allow(clippy::too_many_arguments)]
    pub fn topk_tile(
        &self,
        dots: &CudaView<f32>,
        (nq, nt): (usize, usize),
        norms: &CudaView<f32>,
        tile_base: u32,
        self_base: u32,
        k: usize,
        best: &mut CudaViewMut<u64>,
    ) -> Result<(), GpuError> {
        if k == 0 || k > MAX_TOPK as usize {
            return Err(GpuError::Unsupported(format!(
                "GPU top-k needs 1 <= k <= {MAX_TOPK}, got {k}"
            )));
        }
        assert!(dots.len() >= nq * nt && norms.len() >= nt && best.len() >= nq * k);
        let smem = 8 * (BLOCK_THREADS as usize + 2 + TOPK_CANDIDATES);
        let (nq32, nt32, k32) = (nq as u32, nt as u32, k as u32);
        let mut b = self.stream.launch_builder(&self.topk_tile);
        b.arg(dots)
            .arg(&nq32)
            .arg(&nt32)
            .arg(norms)
            .arg(&tile_base)
            .arg(&self_base)
            .arg(&k32)
            .arg(best);
        // SAFETY: sizes asserted above.
        unsafe { b.launch(cfg(nq32, smem as u32)) }?;
        Ok(())
    }
}
