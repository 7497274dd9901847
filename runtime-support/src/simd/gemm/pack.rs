//! The GEMM operands: B packed into strips on the stack (`PackB`), A read
//! in place or from weight panels packed ahead of time (`ReadA`).

use crate::simd::strip::Level;
use crate::simd::strip::prefetch_to;

/// The B operand of a product, packed strip by strip.
pub(crate) trait PackB {
    /// Writes `B(p0 + p, j0 + c)` to `out[p * stride + c]` for `p < kc`,
    /// `c < nr`, and zero for `nr <= c < stride`. `out` has `kc * stride`
    /// entries and `nr <= stride` ([`debug_check_pack`]); the caller keeps
    /// `p0 + kc` and `j0 + nr` within B.
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]);

    /// B's storage and row stride when its rows are contiguous (`B(p, j)`
    /// at `data[p * rs + j]`), for kernels that read them in place.
    fn rows(&self) -> Option<(&[f32], usize)> {
        None
    }

    /// Steps `pc..` of the `nr`-column strip starting at column `jc` and
    /// the distance `ldb` between its rows, when B already holds it in a
    /// packed layout (`B(pc + p, jc + c)` at `[p * ldb + c]`, zero past B's
    /// columns): kernels read it in place. `ldb` is `nr`, or a multiple of
    /// it when a narrower kernel reads part of a wider strip (only kernels
    /// with [`Micro::DIRECT_B`](crate::simd::gemm::micro::Micro::DIRECT_B)
    /// take those).
    fn strip(&self, pc: usize, jc: usize, nr: usize) -> Option<(&[f32], usize)> {
        let _ = (pc, jc, nr);
        None
    }

    /// Asks the cache `level` for what [`PackB::pack`] of the same
    /// arguments will read (a hint: nothing is read), so the packing of a
    /// strip does not wait on memory row after row.
    fn prefetch(&self, p0: usize, kc: usize, j0: usize, nr: usize, level: Level) {
        let _ = (p0, kc, j0, nr, level);
    }
}

/// [`PackB::pack`]'s bounds on `out` (panics in debug builds when they do
/// not hold; a packer then writes what fits).
#[inline(always)]
pub(crate) fn debug_check_pack(kc: usize, nr: usize, stride: usize, out: &[f32]) {
    debug_assert!(
        nr <= stride && kc.checked_mul(stride).is_some_and(|v| v <= out.len()),
        "PackB::pack: {kc} rows of {nr} columns, {stride} apart, in {} floats",
        out.len()
    );
}

/// The width of the strips a constant B is laid out in ahead of time
/// ([`crate::gemm::pack_b_strips`]): the AVX-512 kernel's tile width.
pub const STRIP: usize = 32;

/// A B of `k` rows laid out in strips of [`STRIP`] columns: `B(p, j)` at
/// `data[(j / STRIP) * STRIP * k + p * STRIP + j % STRIP]`, zero in the
/// columns past B's own.
pub(crate) struct StripsB<'a> {
    pub data: &'a [f32],
    pub k: usize,
}

impl PackB for StripsB<'_> {
    #[inline]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        debug_check_pack(kc, nr, stride, out);
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let (head, tail) = row.split_at_mut(nr.min(stride));
            let row_off = (p0 + p) * STRIP;
            // Each run of columns inside one strip is contiguous.
            let mut c = 0;
            while c < head.len() {
                let j = j0 + c;
                let len = (STRIP - j % STRIP).min(head.len() - c);
                let base = (j / STRIP) * STRIP * self.k + row_off + j % STRIP;
                let dst = &mut head[c..c + len];
                match self.data.get(base..base + len) {
                    Some(src) => dst.copy_from_slice(src),
                    None => dst.fill(0.0),
                }
                c += len;
            }
            tail.fill(0.0);
        }
    }

    /// Whole strips, and for kernels a half or a quarter as wide (AVX2's 16
    /// columns) each part of one, its rows [`STRIP`] apart. Repacking the
    /// strips 16 wide instead cost a GPT layer's 128x256 by 256x1024
    /// product 1.23 ms against 1.05 (Zen 3): B is copied again for every
    /// block of rows.
    fn strip(&self, pc: usize, jc: usize, nr: usize) -> Option<(&[f32], usize)> {
        if nr == 0 || !STRIP.is_multiple_of(nr) || !jc.is_multiple_of(nr) {
            return None;
        }
        let start = (jc / STRIP).checked_mul(STRIP)?.checked_mul(self.k)?;
        let at = start.checked_add(pc.checked_mul(STRIP)?)?.checked_add(jc % STRIP)?;
        Some((self.data.get(at..)?, STRIP))
    }
}

/// A dense B: element `(p, j)` at `data[p * rs + j * cs]`.
pub(crate) struct DenseB<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl PackB for DenseB<'_> {
    fn rows(&self) -> Option<(&[f32], usize)> {
        (self.cs == 1).then_some((self.data, self.rs))
    }

    #[inline(always)]
    fn prefetch(&self, p0: usize, kc: usize, j0: usize, nr: usize, level: Level) {
        if self.cs != 1 {
            return;
        }
        for p in p0..p0 + kc {
            let base = p * self.rs + j0;
            prefetch_to(level, self.data.get(base..base + nr).unwrap_or(&[]));
        }
    }

    // Inlined into the product driver, so the copies take its vector width.
    #[inline(always)]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        debug_check_pack(kc, nr, stride, out);
        if self.rs == 1 && self.cs != 1 && nr <= stride {
            // A transposed B (attention's K): each column is contiguous,
            // read once instead of one element per row.
            for row in out.chunks_exact_mut(stride).take(kc) {
                row[nr..].fill(0.0);
            }
            for c in 0..nr {
                let base = (j0 + c) * self.cs + p0;
                let col = self.data.get(base..base + kc);
                for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
                    row[c] = col.map_or(0.0, |col| col[p]);
                }
            }
            return;
        }
        if self.cs == 1 {
            self.pack_rows(p0, kc, j0, nr, stride, out);
            return;
        }
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let base = (p0 + p) * self.rs + j0 * self.cs;
            let (head, tail) = row.split_at_mut(nr);
            for (c, v) in head.iter_mut().enumerate() {
                *v = self.data.get(base + c * self.cs).copied().unwrap_or(0.0);
            }
            tail.fill(0.0);
        }
    }
}

impl DenseB<'_> {
    /// [`PackB::pack`] for contiguous rows (`cs == 1`), a strip of rows
    /// from as many places in memory (a pointwise convolution's input planes,
    /// `rs` apart). Full strips of the usual widths copy as fixed-size
    /// vector moves rather than a call per row, and each row's next strip
    /// (the columns the following call packs) is prefetched: with a hundred
    /// rows or more, too many streams for the hardware prefetcher to follow,
    /// every row would otherwise wait on memory in turn.
    #[inline(always)]
    fn pack_rows(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nr: usize,
        stride: usize,
        out: &mut [f32],
    ) {
        #[inline(always)]
        fn rows<const N: usize>(b: &DenseB<'_>, p0: usize, kc: usize, j0: usize, out: &mut [f32]) {
            for (p, row) in out.chunks_exact_mut(N).take(kc).enumerate() {
                let base = (p0 + p) * b.rs + j0;
                let Ok(dst) = <&mut [f32; N]>::try_from(row) else { return };
                match b.data.get(base..base + N).map(<&[f32; N]>::try_from) {
                    Some(Ok(src)) => *dst = *src,
                    _ => *dst = [0.0; N],
                }
                crate::simd::strip::prefetch(b.data.get(base + N..base + 2 * N).unwrap_or(&[]));
            }
        }
        match (nr, stride) {
            (48, 48) => return rows::<48>(self, p0, kc, j0, out),
            (32, 32) => return rows::<32>(self, p0, kc, j0, out),
            (16, 16) => return rows::<16>(self, p0, kc, j0, out),
            (8, 8) => return rows::<8>(self, p0, kc, j0, out),
            (4, 4) => return rows::<4>(self, p0, kc, j0, out),
            _ => {}
        }
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let base = (p0 + p) * self.rs + j0;
            let Some((head, tail)) = row.split_at_mut_checked(nr) else { return };
            match self.data.get(base..base + nr) {
                Some(src) => head.copy_from_slice(src),
                None => head.fill(0.0),
            }
            tail.fill(0.0);
        }
    }
}

/// The A operand: element `(i, p)` at `data[off + i * rs + p * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct ViewA<'a> {
    pub data: &'a [f32],
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

/// An A operand as the micro-kernels read it: element `(i, p)` at
/// `data()[row(i) + p * cs()]`. Strided views ([`ViewA`]) and weights
/// packed in row panels ([`PanelA`]) both have that form, so every kernel,
/// whatever its tile height, reads either.
pub(crate) trait ReadA: Copy {
    /// The storage.
    fn data(&self) -> &[f32];
    /// The step between consecutive elements of a row.
    fn cs(&self) -> usize;
    /// Where row `i` starts; only called for rows [`ReadA::fits`] accepted.
    fn row(&self, i: usize) -> usize;
    /// Whether every element of the first `m` rows and `k` columns lies
    /// within the storage (`m` and `k` at least 1).
    fn fits(&self, m: usize, k: usize) -> bool;

    /// Asks the caches for steps `p0..p0 + steps` of rows `i..i + rows`
    /// (those within the storage): the start of a tile the kernel reads
    /// next. A hint only.
    fn prefetch(&self, i: usize, rows: usize, p0: usize, steps: usize);
}

/// Steps of `k` of the next tile of a large A that [`drive_buf`](super::drive_buf) asks the
/// caches for while the current tile runs (the AVX-512 kernel fetches the
/// rest of each tile as it goes, this many steps ahead).
pub(in crate::simd) const A_AHEAD: usize = 64;

/// Floats of A (256 KiB) from which [`drive_buf`](super::drive_buf) prefetches the tiles of A:
/// smaller operands stay in cache from one strip to the next.
pub(in crate::simd) const A_PREFETCH_FROM: usize = 1 << 16;

impl ReadA for ViewA<'_> {
    #[inline(always)]
    fn data(&self) -> &[f32] {
        self.data
    }

    #[inline(always)]
    fn cs(&self) -> usize {
        self.cs
    }

    #[inline(always)]
    fn row(&self, i: usize) -> usize {
        self.off + i * self.rs
    }

    fn fits(&self, m: usize, k: usize) -> bool {
        let last = (m - 1)
            .checked_mul(self.rs)
            .and_then(|v| v.checked_add((k - 1).checked_mul(self.cs)?))
            .and_then(|v| v.checked_add(self.off));
        last.is_some_and(|v| v < self.data.len())
    }

    #[inline(always)]
    fn prefetch(&self, i: usize, rows: usize, p0: usize, steps: usize) {
        if self.cs == 1 {
            for r in i..i + rows {
                let start = self.off.saturating_add(r.saturating_mul(self.rs)).saturating_add(p0);
                let end = start.saturating_add(steps).min(self.data.len());
                crate::simd::strip::prefetch(self.data.get(start..end).unwrap_or(&[]));
            }
        }
    }
}

/// Rows per panel of [`PanelA`].
pub(crate) const PANEL: usize = 8;

/// Floats from one panel of [`PanelA`] to the next for rows of `k`.
#[inline(always)]
pub(crate) fn panel_stride(k: usize) -> usize {
    PANEL * k
}

/// Floats of `m` rows of `k` in panels (`m` rounded up to a multiple of
/// [`PANEL`]); `None` on overflow.
pub(crate) fn panels_len(m: usize, k: usize) -> Option<usize> {
    m.div_ceil(PANEL).checked_mul(PANEL.checked_mul(k)?)
}

/// A matrix of `k` columns stored in panels of [`PANEL`] rows: element
/// `(i, p)` at `data[(i / PANEL) * PANEL * k + p * PANEL + i % PANEL]`, so
/// the rows one tile reads at a step of `p` are adjacent (one cache line)
/// instead of a row length apart, where long rows make them compete for the
/// same L1 sets. Rows past the last real one are zero padding.
#[derive(Clone, Copy)]
pub(crate) struct PanelA<'a> {
    pub data: &'a [f32],
    pub k: usize,
}

impl ReadA for PanelA<'_> {
    #[inline(always)]
    fn data(&self) -> &[f32] {
        self.data
    }

    #[inline(always)]
    fn cs(&self) -> usize {
        PANEL
    }

    #[inline(always)]
    fn row(&self, i: usize) -> usize {
        (i / PANEL) * panel_stride(self.k) + i % PANEL
    }

    fn fits(&self, m: usize, k: usize) -> bool {
        k <= self.k && panels_len(m, self.k).is_some_and(|v| v <= self.data.len())
    }

    #[inline(always)]
    fn prefetch(&self, i: usize, rows: usize, p0: usize, steps: usize) {
        // A tile of whole panels is one run per panel.
        for panel in i / PANEL..(i + rows).div_ceil(PANEL) {
            let start = panel.saturating_mul(panel_stride(self.k)).saturating_add(p0 * PANEL);
            let end = start.saturating_add(steps.saturating_mul(PANEL)).min(self.data.len());
            crate::simd::strip::prefetch(self.data.get(start..end).unwrap_or(&[]));
        }
    }
}
