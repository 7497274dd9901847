//! Dispatch for the vectorised depthwise convolution of one plane.

use super::Activation;

/// Geometry of one depthwise plane: input `h x w`, output `oh x ow`,
/// kernel `kh x kw`, strides, dilations and the leading pads. Only the
/// vector kernels read it.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DwGeom {
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub sy: usize,
    pub sx: usize,
    pub dy: usize,
    pub dx: usize,
    pub pt: usize,
    pub pl: usize,
}

/// Computes one depthwise plane on the vector unit when there is one and
/// the geometry suits it; returns `false`, writing nothing, otherwise (the
/// caller then runs its portable loops).
#[inline]
pub(crate) fn depthwise_plane(
    g: &DwGeom,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if let Some(cpu) = super::avx2::Avx2::detect() {
        return super::avx2_dw::depthwise_plane(cpu, g, x, wk, bias, act, y);
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(cpu) = super::neon::Neon::detect() {
        return super::neon::depthwise_plane(cpu, g, x, wk, bias, act, y);
    }
    let _ = (g, x, wk, bias, act, y);
    false
}
