//! Stand-ins for the GPU phases when the crate is built without its `gpu`
//! feature: the same names and signatures over [`Gpu`], a type with no
//! values, so the build's one code path compiles unchanged and its GPU
//! branches are statically dead (no device is ever opened; `Backend::Gpu`
//! is an error that says why).

/// No GPU can exist in this build.
pub enum Gpu {}

impl Gpu {
    /// Never reached: `Backend::resolve` refuses the GPU in this build.
    pub fn open(_ordinal: usize) -> Result<Self, crate::BuildError> {
        Err(gpu_rows::not_built())
    }

    pub fn describe(&self) -> String {
        match *self {}
    }
}

pub mod gpu_rows {
    use super::Gpu;
    use crate::progress::Stage;
    use crate::rows::ReverseLists;
    use crate::BuildError;
    use octex_lattice::CopyMap;

    /// The GPU exact rows' longest row, as with the feature (never used here:
    /// there is no device to run them).
    pub const MAX_K: usize = 128;

    pub(crate) fn not_built() -> BuildError {
        BuildError::NoGpuFeature
    }

    #[allow(clippy::type_complexity)]
    pub fn principal(
        g: &Gpu,
        _: &CopyMap,
        _: &[f32],
        _: bool,
    ) -> Result<(Vec<f32>, Option<Vec<half::f16>>), BuildError> {
        match *g {}
    }

    pub fn exact_knn(
        g: &Gpu,
        _: &[f32],
        _: usize,
        _: usize,
        _: bool,
        _: &Stage,
    ) -> Result<(Vec<u32>, Vec<f32>), BuildError> {
        match *g {}
    }

    pub fn reverse_lists(
        g: &Gpu,
        _: &[u32],
        _: &[f32],
        _: usize,
        _: usize,
    ) -> Result<ReverseLists, BuildError> {
        match *g {}
    }
}

pub mod gpu_ripples {
    use super::Gpu;
    use crate::progress::Stage;
    use crate::ripples::{FlatRipples, RippleSpec};
    use crate::spacing::{SpacingChoice, SpacingTargets};
    use crate::BuildError;
    use octex_lattice::CopyMap;

    /// Principal coordinates on a device that cannot exist.
    pub struct DevicePrincipal<'a> {
        _host: &'a [f32],
        never: Gpu,
    }

    impl<'a> DevicePrincipal<'a> {
        pub fn new(g: &Gpu, _: &'a [f32], _: usize) -> Result<Self, BuildError> {
            match *g {}
        }
    }

    pub fn fits(g: &Gpu, _: usize, _: &RippleSpec, _: usize) -> Result<bool, BuildError> {
        match *g {}
    }

    pub fn build_all(
        g: &Gpu,
        _: &CopyMap,
        _: &DevicePrincipal,
        _: &RippleSpec,
        _: &Stage,
    ) -> Result<FlatRipples, BuildError> {
        match *g {}
    }

    pub fn sketch(
        g: &Gpu,
        p: &DevicePrincipal,
        _: usize,
        _: &[f32],
    ) -> Result<Vec<i8>, BuildError> {
        let _ = g;
        match p.never {}
    }

    pub fn choose_spacings(
        g: &Gpu,
        _: &CopyMap,
        _: &[f32],
        _: &SpacingTargets,
    ) -> Result<SpacingChoice, BuildError> {
        match *g {}
    }
}
