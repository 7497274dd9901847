//! The window geometry shared by convolutions and pools, computed at
//! generation time with the spec's formulas (see the parent module): the
//! per-axis attributes, `auto_pad`, and the output dims with resolved pads.

use super::*;

pub(super) fn to_usize(v: i64, what: &str) -> OpResult<usize> {
    usize::try_from(v).or_else(|_| invalid(format!("{what} must not be negative, got {v}")))
}

pub(in crate::ops) fn overflow<T>(what: &str) -> OpResult<T> {
    invalid(format!("{what} overflows"))
}

/// A per-axis integer-list attribute: `n` values, each at least `min`, or
/// `default` on every axis when absent.
pub(super) fn spatial_ints(
    cx: &NodeCx<'_>,
    name: &str,
    n: usize,
    default: usize,
    min: usize,
) -> OpResult<Vec<usize>> {
    let Some(v) = cx.ints(name) else { return Ok(vec![default; n]) };
    if v.len() != n {
        return invalid(format!(
            "attribute '{name}' has {} values; the input has {n} spatial axes",
            v.len()
        ));
    }
    v.iter()
        .map(|&x| {
            let u = to_usize(x, &format!("attribute '{name}'"))?;
            if u < min {
                return invalid(format!("attribute '{name}' must be at least {min}, got {x}"));
            }
            Ok(u)
        })
        .collect()
}

/// The `auto_pad` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

pub(super) fn auto_pad(cx: &NodeCx<'_>) -> OpResult<AutoPad> {
    match cx.string_or("auto_pad", "NOTSET").as_str() {
        "NOTSET" => Ok(AutoPad::NotSet),
        "SAME_UPPER" => Ok(AutoPad::SameUpper),
        "SAME_LOWER" => Ok(AutoPad::SameLower),
        "VALID" => Ok(AutoPad::Valid),
        other => invalid(format!(
            "auto_pad '{other}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
        )),
    }
}

/// The explicit `pads` attribute as `(begin, end)`, all zero when absent.
/// With an `auto_pad` other than NOTSET the spec forbids `pads`; all-zero
/// pads (which some exporters write anyway) are accepted.
pub(super) fn explicit_pads(
    cx: &NodeCx<'_>,
    n: usize,
    ap: AutoPad,
) -> OpResult<(Vec<usize>, Vec<usize>)> {
    let Some(p) = cx.ints("pads") else { return Ok((vec![0; n], vec![0; n])) };
    if p.len() != 2 * n {
        return invalid(format!(
            "attribute 'pads' has {} values; {n} spatial axes need {}",
            p.len(),
            2 * n
        ));
    }
    let p: Vec<usize> =
        p.iter().map(|&v| to_usize(v, "attribute 'pads'")).collect::<OpResult<_>>()?;
    if ap != AutoPad::NotSet && p.iter().any(|&v| v != 0) {
        return invalid("attributes 'pads' and 'auto_pad' cannot be used together");
    }
    Ok((p[..n].to_vec(), p[n..].to_vec()))
}

/// An owned sliding-window geometry (see [`Window`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::ops) struct Geometry {
    pub(in crate::ops) in_dims: Vec<usize>,
    pub(in crate::ops) out_dims: Vec<usize>,
    pub(in crate::ops) kernel: Vec<usize>,
    pub(in crate::ops) strides: Vec<usize>,
    pub(in crate::ops) dilations: Vec<usize>,
    pub(in crate::ops) pads_begin: Vec<usize>,
    pub(in crate::ops) pads_end: Vec<usize>,
}

impl Geometry {
    pub(in crate::ops) fn window(&self) -> Window<'_> {
        Window {
            in_dims: &self.in_dims,
            out_dims: &self.out_dims,
            kernel: &self.kernel,
            strides: &self.strides,
            dilations: &self.dilations,
            pads_begin: &self.pads_begin,
            pads_end: &self.pads_end,
        }
    }

    /// A 1-D window as the 2-D one of height 1 over the same data (`[N, C,
    /// L]` is `[N, C, 1, L]` in memory): the runtime's fast convolution and
    /// pooling kernels are 2-D ones. Other ranks are returned unchanged.
    pub(in crate::ops) fn into_2d(self) -> Geometry {
        if self.in_dims.len() != 1 {
            return self;
        }
        let lift = |v: Vec<usize>, unit: usize| [vec![unit], v].concat();
        Geometry {
            in_dims: lift(self.in_dims, 1),
            out_dims: lift(self.out_dims, 1),
            kernel: lift(self.kernel, 1),
            strides: lift(self.strides, 1),
            dilations: lift(self.dilations, 1),
            pads_begin: lift(self.pads_begin, 0),
            pads_end: lift(self.pads_end, 0),
        }
    }

    pub(in crate::ops) fn tokens(&self, rt: &TokenStream) -> TokenStream {
        let (i, o, k) =
            (lit::usizes(&self.in_dims), lit::usizes(&self.out_dims), lit::usizes(&self.kernel));
        let (s, d) = (lit::usizes(&self.strides), lit::usizes(&self.dilations));
        let (pb, pe) = (lit::usizes(&self.pads_begin), lit::usizes(&self.pads_end));
        quote! {
            #rt::conv::Window {
                in_dims: #i, out_dims: #o, kernel: #k, strides: #s, dilations: #d,
                pads_begin: #pb, pads_end: #pe,
            }
        }
    }
}

/// `d * (k - 1) + 1`: the extent of a dilated kernel.
pub(super) fn span(k: usize, d: usize) -> OpResult<usize> {
    match k.checked_sub(1).and_then(|v| v.checked_mul(d)).and_then(|v| v.checked_add(1)) {
        Some(v) if k > 0 => Ok(v),
        _ if k == 0 => invalid("kernel dims must be at least 1"),
        _ => overflow("the dilated kernel size"),
    }
}

/// The geometry of a forward sliding window (Conv and the pools) over
/// `in_dims` with the node's strides, dilations, pads and `auto_pad`;
/// `ceil_mode` rounds the output size up (pooling only).
pub(in crate::ops) fn forward_geometry(
    cx: &NodeCx<'_>,
    in_dims: &[usize],
    kernel: Vec<usize>,
    ceil_mode: bool,
) -> OpResult<Geometry> {
    let n = in_dims.len();
    let strides = spatial_ints(cx, "strides", n, 1, 1)?;
    let dilations = spatial_ints(cx, "dilations", n, 1, 1)?;
    let ap = auto_pad(cx)?;
    let (mut pads_begin, mut pads_end) = explicit_pads(cx, n, ap)?;
    let mut out_dims = Vec::with_capacity(n);
    for i in 0..n {
        let (x, s) = (in_dims[i], strides[i]);
        let sp = span(kernel[i], dilations[i])?;
        let out = match ap {
            AutoPad::NotSet | AutoPad::Valid => {
                let (pb, pe) = (pads_begin[i], pads_end[i]);
                let Some(padded) = x.checked_add(pb).and_then(|v| v.checked_add(pe)) else {
                    return overflow("the padded input size");
                };
                let Some(room) = padded.checked_sub(sp) else {
                    return invalid(format!(
                        "on spatial axis {i} the window spans {sp} elements (kernel {}, \
                         dilation {}), more than the padded input's {padded}",
                        kernel[i], dilations[i]
                    ));
                };
                // VALID's output size is the same with or without ceil_mode.
                if ceil_mode && ap == AutoPad::NotSet {
                    let mut out = room.div_ceil(s) + 1;
                    // A last window starting in the end padding is dropped.
                    if (out - 1).checked_mul(s).is_none_or(|start| start >= x + pb) {
                        out -= 1;
                    }
                    if out < room / s + 1 {
                        // Even floor's last window lies wholly in the end padding.
                        return unsupported(format!(
                            "ceil_mode with an end padding ({pe}) at least as large as the \
                             window ({sp}) on spatial axis {i}"
                        ));
                    }
                    out
                } else {
                    room / s + 1
                }
            }
            AutoPad::SameUpper | AutoPad::SameLower => {
                let out = x.div_ceil(s);
                let Some(need) = (out - 1).checked_mul(s).and_then(|v| v.checked_add(sp)) else {
                    return overflow("the padded input size");
                };
                let total = need.saturating_sub(x);
                let small = total / 2;
                if ap == AutoPad::SameUpper {
                    (pads_begin[i], pads_end[i]) = (small, total - small);
                } else {
                    (pads_begin[i], pads_end[i]) = (total - small, small);
                }
                out
            }
        };
        out_dims.push(out);
    }
    let g = Geometry {
        in_dims: in_dims.to_vec(),
        out_dims,
        kernel,
        strides,
        dilations,
        pads_begin,
        pads_end,
    };
    if g.window().check(ceil_mode).is_err() {
        return invalid(format!(
            "the window geometry is inconsistent (input {:?}, kernel {:?}, output {:?})",
            g.in_dims, g.kernel, g.out_dims
        ));
    }
    Ok(g)
}
