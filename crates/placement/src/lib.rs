//! # octex-placement
//!
//! Will hold the tiered placement planner: given the byte size of every part of an
//! index (from `octex-index`) and the memory of each GPU and of the host, decide
//! which part lives in which GPU's HBM or in host memory, what is replicated or
//! split across GPUs, and what to shrink when nothing fits (the paper's section
//! 4.3: the parts every wave reads stay in HBM; the rerank vectors may live on the
//! host).
//!
//! Place in the pipeline: consulted by the GPU backend of `octex-search` when it
//! loads an index. Depends on `octex-index` for sizes only. Empty for now.
