//! The blocked single-precision GEMM driver: tiling over `MR x NR`
//! micro-kernel tiles, B packed strip by strip, the fused epilogue applied
//! per tile.

pub(in crate::simd) mod epilogue;
pub(in crate::simd) mod micro;
pub(in crate::simd) mod pack;
#[cfg(test)]
mod tests;

use crate::simd::Vectorize;
use crate::simd::gemm::epilogue::Epilogue;
use crate::simd::gemm::epilogue::Tail;
use crate::simd::gemm::epilogue::smooth_block;
use crate::simd::gemm::micro::APanel;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::BStrip;
use crate::simd::gemm::micro::DstBlock;
use crate::simd::gemm::micro::MAX_MR;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;
use crate::simd::gemm::micro::portable::portable_kernel;
use crate::simd::gemm::pack::A_AHEAD;
use crate::simd::gemm::pack::A_PREFETCH_FROM;
use crate::simd::gemm::pack::DenseB;
use crate::simd::gemm::pack::PackB;
use crate::simd::gemm::pack::ReadA;
use crate::simd::gemm::pack::STRIP;
use crate::simd::gemm::pack::StripsB;
use crate::simd::gemm::pack::ViewA;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx512;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use crate::simd::isa::neon;
use crate::simd::strip::Level;
use crate::simd::strip::Strip;
use crate::simd::vectorize;

/// Where the `m x n` result goes: row `i` of it starts at `y[i * ldy]`.
pub(crate) struct Out<'a> {
    pub y: &'a mut [f32],
    pub ldy: usize,
}

/// `Y = epi(A B)` with the micro-kernel `kern`, B packed in strips of up
/// to `min(BUF / NR, KC)` steps of `k`. The caller has checked that A and Y
/// hold the sizes; an index out of range stops the product early rather
/// than panicking.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(in crate::simd) fn drive_buf<'e, K: Micro, A: ReadA, B: PackB, const BUF: usize>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &'e Epilogue<'e>,
) {
    let (mr, nr) = (K::MR, K::NR);
    // B laid out ahead of time in strips this kernel reads in place (rows
    // `nr` apart, or part of wider strips for kernels that take any `ldb`).
    let laid_out =
        |pc: usize, jc: usize| b.strip(pc, jc, nr).filter(|&(_, ldb)| ldb == nr || K::DIRECT_B);
    let packed_b = laid_out(0, 0).is_some();
    // A large A comes from memory: the start of each tile is fetched while
    // the one before it runs.
    let stream_a = a.data().len() > A_PREFETCH_FROM;
    if K::DIRECT_B && !packed_b {
        // B read in place needs no packed block to be shared by many tiles.
        let rows_from = if b.rows().is_some() { K::MR } else { WIDE_ROWS_FROM };
        let w = match n {
            _ if n > nr && n <= K::WIDE => Some(n),
            _ if K::WIDE > 0
                && n.is_multiple_of(K::WIDE)
                && n <= WIDE_UP_TO * K::WIDE
                && m >= rows_from =>
            {
                Some(K::WIDE)
            }
            _ if K::WIDE > 0 && n > K::WIDE && m >= rows_from => Some(K::WIDE - 1),
            _ => None,
        };
        if let Some(w) = w {
            drive_wide::<K, A, B, BUF>(kern, m, n, k, w, a, b, out, epi, stream_a);
            return;
        }
    }
    // A few strips cover every column of a product with a large A (a 7x7
    // output's 49 by the weights of a late layer): blocks of `k` shallow
    // enough that all of them fit the buffer at once, so each tile of A,
    // read from memory once per block, runs across every column. (A small
    // A, such as one of Winograd's products, stays in L2 between strips and
    // is faster in deeper blocks.)
    let all = n.div_ceil(nr);
    let kc_cap = match (BUF / nr).min(K::KC).max(1) {
        cap if stream_a && !packed_b && (2..=WHOLE_STRIPS).contains(&all) && k > cap / all => {
            (cap / all).max(1)
        }
        cap => cap,
    };
    // Blocks of `k` of even depth (288 = 144 + 144, not 256 + 32): the
    // partial sums make one round trip through Y per block.
    let kc_max = k.div_ceil(k.div_ceil(kc_cap));
    let mut strip = Strip::<BUF>::new();
    let mut rows = [0usize; MAX_MR];
    let Some(rows) = rows.get_mut(..mr) else { return };
    let identity = epi.is_identity();
    // With few rows of A, each packed strip would serve a few tiles only:
    // kernels that can read B's rows in place then skip the copy.
    // Up to 64 rows unless B's rows are a multiple of 4 KiB apart: then
    // every row of a strip falls in the same L1 sets and a packed copy
    // does better from 33 rows on.
    // Kernels without wide tiles (AVX2) read B in place for any number of
    // rows once `k` is deep enough, if B stays in L2: each block of rows
    // would pack B again (1x1 convolutions on Zen 3: 320->1280 at 7x7
    // 0.749 -> 0.692 ms; with `k` of 16 or 24 the packed copy is as fast).
    // A larger B comes from further away: the strips of its rows, a
    // multiple of 64 bytes apart, fall in a few L1 sets and are fetched
    // again for each tile, while a packed strip is fetched ahead, once
    // (Zen 3, with those prefetches: 256->128 at 56x56 3.27 -> 2.84 ms,
    // 512->256 at 28x28 3.30 -> 2.61, 672->112 at 14x14 0.458 -> 0.420).
    let deep = K::WIDE == 0 && k >= 64 && k.saturating_mul(n) <= B_IN_L2;
    let direct = match b.rows() {
        Some((_, rs)) if K::DIRECT_B && (m <= 32 || ((m <= 64 || deep) && rs % 1024 != 0)) => {
            b.rows()
        }
        _ => None,
    };
    // With a short `k`, each strip serves its tiles for a few steps only and
    // the product is bound by its stores: a block of strips that fills the
    // buffer is packed at once and each tile's rows run across all of it,
    // so the output is written in runs of many lines per row instead of two
    // lines in each of all the rows in turn (too many streams for the
    // caches to fetch ahead). B already laid out in strips keeps one strip
    // at a time (with its prefetches).
    let group = match packed_b {
        true => 1,
        false => (BUF / kc_max.saturating_mul(nr).max(1)).clamp(1, MAX_GROUP),
    };
    // When one block of strips holds every column, each tile of A is done
    // with once it has run across them: A needs no blocking for the caches,
    // and the strips are packed once per block of `k` instead of once per
    // block of rows.
    let mc_max = if n <= group * nr { m } else { K::MC };
    let (y, ldy) = (out.y, out.ldy);
    let mut pc = 0;
    while pc < k {
        let kc = kc_max.min(k - pc);
        let (first, last) = (pc == 0, pc + kc == k);
        let mut ic = 0;
        while ic < m {
            let mc = mc_max.min(m - ic);
            // With a large A, the start of the tile after the one at row
            // `ir` is fetched while that one runs.
            let fetch_next = |ir: usize| {
                if stream_a && ir + mr < ic + mc {
                    a.prefetch(ir + mr, mr.min(ic + mc - ir - mr), pc, kc.min(A_AHEAD));
                }
            };
            // The B packed at column `j` (past `n`: the columns of the
            // next block of rows, or of `k`, counted from 0), as steps of
            // `k` and first column: the source of a later packing, whose
            // rows each tile fetches a part of into L2 while B packed
            // `step` columns at a time is read here, so that packing finds
            // them there (B too large for the caches otherwise arrives
            // from memory one row at a time, as the packing asks for it).
            let ahead = |j: usize, step: usize| {
                let wrapped = j.checked_sub(n.next_multiple_of(step)).filter(|&j| j < n);
                match wrapped {
                    None if j < n => Some((pc, kc, j)),
                    Some(j) if ic + mc < m => Some((pc, kc, j)),
                    Some(j) if pc + kc < k => Some((pc + kc, kc_max.min(k - pc - kc), j)),
                    _ => None,
                }
            };
            let fetch_b = |source: Option<(usize, usize, usize)>, width: usize, ir: usize| {
                let (tiles, t) = (mc.div_ceil(mr), (ir - ic) / mr);
                if let Some((p0, depth, j0)) = source.filter(|_| tiles >= 4) {
                    let (from, to) = (t * depth / tiles, (t + 1) * depth / tiles);
                    b.prefetch(p0 + from, to - from, j0, width.min(n - j0), Level::L2);
                }
            };
            let mut jc = 0;
            while group > 1 && jc < n {
                let bcols = (group * nr).min(n - jc);
                let nstrips = bcols.div_ceil(nr);
                // Strip `s` of the block at `blk[s * step..]`, rows `ldb` apart.
                let (blk, ldb, step) = match direct {
                    Some((data, rs)) => match data.get(pc * rs + jc..) {
                        Some(d) => (d, rs, nr),
                        None => {
                            debug_assert!(false, "product: B short of row {pc}, column {jc}");
                            return;
                        }
                    },
                    None => {
                        let buf = strip.get(nstrips * kc * nr);
                        for (s, part) in buf.chunks_exact_mut(kc * nr).enumerate() {
                            let j = jc + s * nr;
                            b.pack(pc, kc, j, nr.min(n - j), nr, part);
                        }
                        (&*buf, nr, kc * nr)
                    }
                };
                // The next block's source.
                let source = direct.is_none().then(|| ahead(jc + group * nr, group * nr)).flatten();
                let mut ir = ic;
                while ir < ic + mc {
                    let nrows = mr.min(ic + mc - ir);
                    fetch_next(ir);
                    fetch_b(source, group * nr, ir);
                    for (r, row) in rows.iter_mut().enumerate() {
                        *row = a.row(ir + r.min(nrows - 1)) + pc * a.cs();
                    }
                    // Whole tiles across the block at once, where the
                    // kernel can; the rest tile by tile.
                    let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: jc });
                    let done = match y.get_mut(ir * ldy + jc..) {
                        Some(dst) => kern.strips(
                            Tile {
                                kc,
                                a: ARows { data: a.data(), rows, cs: a.cs() },
                                b: BStrip { data: blk, ldb },
                                dst: DstBlock {
                                    data: dst,
                                    ldd: ldy,
                                    nrows,
                                    ncols: bcols,
                                    load: !first,
                                },
                                tail,
                            },
                            step,
                        ),
                        None => 0,
                    };
                    for s in done..nstrips {
                        let j = jc + s * nr;
                        let (Some(bs), Some(dst)) =
                            (blk.get(s * step..), y.get_mut(ir * ldy + j..))
                        else {
                            debug_assert!(false, "product: B or Y short of tile ({ir}, {j})");
                            return;
                        };
                        let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: j });
                        let ncols = nr.min(n - j);
                        tile(
                            kern,
                            Tile {
                                kc,
                                a: ARows { data: a.data(), rows, cs: a.cs() },
                                b: BStrip { data: bs, ldb },
                                dst: DstBlock { data: dst, ldd: ldy, nrows, ncols, load: !first },
                                tail,
                            },
                        );
                    }
                    ir += mr;
                }
                jc += bcols;
            }
            while jc < n {
                let ncols = nr.min(n - jc);
                // A strip read in place: the next one is fetched while
                // this one's tiles run, a part per tile, when there are
                // enough tiles to hide the prefetches (a product of few rows
                // spends as much issuing them as it saves).
                let mut next: &[f32] = &[];
                // The source of the strip packed two after this one.
                let mut source = None;
                let tiles = mc.div_ceil(mr);
                let (buf, ldb) = match (laid_out(pc, jc), direct) {
                    (Some((s, ldb)), _) if tiles >= 4 => {
                        // The next strip, when it is not another part of this one.
                        if (jc + nr).is_multiple_of(ldb) {
                            let after = laid_out(pc, jc + nr).or_else(|| laid_out(pc + kc, 0));
                            next = after.map_or(&[], |(t, _)| t.get(..kc * ldb).unwrap_or(t));
                        }
                        (s, ldb)
                    }
                    (Some(s), _) => s,
                    (None, Some((data, rs))) => match data.get(pc * rs + jc..) {
                        Some(d) => (d, rs),
                        None => {
                            debug_assert!(false, "product: B short of row {pc}, column {jc}");
                            return;
                        }
                    },
                    (None, None) => {
                        let buf = strip.get(kc * nr);
                        b.pack(pc, kc, jc, ncols, nr, buf);
                        source = ahead(jc + 2 * nr, nr);
                        (&*buf, nr)
                    }
                };
                let mut ir = ic;
                while ir < ic + mc {
                    let t = (ir - ic) / mr;
                    let part = next.get(t * next.len() / tiles..(t + 1) * next.len() / tiles);
                    // Into L2: this strip fills L1 (49 rows by 768 -> 3072
                    // with the weights from memory: 3.01 -> 2.68 ms).
                    crate::simd::strip::prefetch_l2(part.unwrap_or(&[]));
                    fetch_b(source, nr, ir);
                    let nrows = mr.min(ic + mc - ir);
                    // The first strip reads A from memory.
                    if jc == 0 {
                        fetch_next(ir);
                    }
                    for (r, row) in rows.iter_mut().enumerate() {
                        // Rows past the end repeat the last one; their sums are dropped.
                        *row = a.row(ir + r.min(nrows - 1)) + pc * a.cs();
                    }
                    let Some(dst) = y.get_mut(ir * ldy + jc..) else {
                        debug_assert!(false, "product: Y short of tile ({ir}, {jc})");
                        return;
                    };
                    let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: jc });
                    tile(
                        kern,
                        Tile {
                            kc,
                            a: ARows { data: a.data(), rows, cs: a.cs() },
                            b: BStrip { data: buf, ldb },
                            dst: DstBlock { data: dst, ldd: ldy, nrows, ncols, load: !first },
                            tail,
                        },
                    );
                    ir += mr;
                }
                jc += nr;
            }
            ic += mc;
        }
        pc += kc;
    }
}

/// [`drive_buf`] on wide tiles ([`Micro::wide`], a kernel that reads B in
/// place) of `w` columns each (`n` itself, or fewer, the last block
/// narrower). For each block of `k` and of rows of A:
/// - B whose rows lie in memory as they are ([`PackB::rows`]) is read
///   there, in chunks of [`SWEEP_COLS`] columns: each tile of rows runs
///   across a whole chunk ([`Micro::sweep`]) before the next tile, so it
///   writes its rows of the output in long runs;
/// - other B is packed `w` wide, a block at a time, and every tile of rows
///   runs across it.
///
/// Tiles whose rows of A are not a panel, and blocks narrower than a wide
/// tile, take the usual tiles over the same block.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(in crate::simd) fn drive_wide<'e, K: Micro, A: ReadA, B: PackB, const BUF: usize>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    w: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &'e Epilogue<'e>,
    stream_a: bool,
) {
    let (mr, nr) = (K::MR, K::NR);
    // Blocks of `k` whose B fits the buffer, of even depth.
    let cap = (BUF / w).clamp(1, K::KC);
    let kc_max = k.div_ceil(k.div_ceil(cap));
    let in_place = b.rows();
    // B read in place in many blocks: each tile of rows runs across a
    // chunk of them at once, writing its rows of the output in long runs.
    let chunk = match in_place {
        Some(_) if w != n => (SWEEP_COLS / w).max(1) * w,
        _ => w,
    };
    // One block of columns: each tile of A is done with once it has run.
    let mc_max = if w == n { m } else { K::MC };
    let mut strip = Strip::<BUF>::new();
    let mut rows = [0usize; MAX_MR];
    let Some(rows) = rows.get_mut(..mr) else { return };
    let identity = epi.is_identity();
    let (y, ldy) = (out.y, out.ldy);
    let mut pc = 0;
    while pc < k {
        let kc = kc_max.min(k - pc);
        let (first, last) = (pc == 0, pc + kc == k);
        let mut ic = 0;
        while ic < m {
            let mc = mc_max.min(m - ic);
            let tiles = mc.div_ceil(mr);
            let mut jc = 0;
            while jc < n {
                let cw = chunk.min(n - jc);
                let (blk, ldb): (&[f32], usize) = match in_place {
                    Some((data, rs)) => match data.get(pc * rs + jc..) {
                        Some(d) => (d, rs),
                        None => {
                            debug_assert!(false, "product: B short of row {pc}, column {jc}");
                            return;
                        }
                    },
                    None => {
                        let buf = strip.get(kc * cw);
                        b.pack(pc, kc, jc, cw, cw, buf);
                        (&*buf, cw)
                    }
                };
                // The source of the next block is fetched while this one's
                // tiles run, a few rows per tile.
                let source = match (in_place.is_some(), jc + cw < n) {
                    (true, _) => None,
                    (false, true) => Some((pc, kc, jc + cw)),
                    (false, false) => (pc + kc < k).then(|| (pc + kc, kc_max.min(k - pc - kc), 0)),
                };
                let mut ir = ic;
                while ir < ic + mc {
                    let nrows = mr.min(ic + mc - ir);
                    if let Some((p0, depth, j0)) = source {
                        let t = (ir - ic) / mr;
                        let (from, to) = (t * depth / tiles, (t + 1) * depth / tiles);
                        b.prefetch(p0 + from, to - from, j0, cw, Level::L1);
                    }
                    if stream_a && jc == 0 && ir + mr < ic + mc {
                        a.prefetch(ir + mr, mr.min(ic + mc - ir - mr), pc, kc.min(A_AHEAD));
                    }
                    let row0 = a.row(ir) + pc * a.cs();
                    let panel = nrows == mr && (1..mr).all(|r| a.row(ir + r) == a.row(ir) + r);
                    let (data, cs) = (a.data(), a.cs());
                    let mut j = 0;
                    if panel
                        && cw > w
                        && w + 1 == K::WIDE
                        && let Some(dst) = y.get_mut(ir * ldy + jc..)
                    {
                        j = kern.sweep(Tile {
                            kc,
                            a: APanel { data, row0, cs },
                            b: BStrip { data: blk, ldb },
                            dst: DstBlock { data: dst, ldd: ldy, nrows, ncols: cw, load: !first },
                            tail: (last && !identity).then_some(Tail { epi, i0: ir, j0: jc }),
                        });
                    }
                    while j < cw {
                        let w = w.min(cw - j);
                        let (Some(bw), Some(dst)) = (blk.get(j..), y.get_mut(ir * ldy + jc + j..))
                        else {
                            debug_assert!(
                                false,
                                "product: B or Y short of tile ({ir}, {})",
                                jc + j
                            );
                            return;
                        };
                        let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: jc + j });
                        // The residual comes from memory in a large model:
                        // the next tile's rows of it are fetched while this
                        // one runs (256->1024 at 14x14 with a residual from
                        // memory: 1.26 -> 1.20 ms).
                        if let (Some(r), true) = (epi.res.as_ref().filter(|_| last), panel) {
                            for i in ir + mr..(ir + 2 * mr).min(m) {
                                let at = i * r.rs + jc + j;
                                crate::simd::strip::prefetch(r.data.get(at..at + w).unwrap_or(&[]));
                            }
                        }
                        let wide = panel
                            && kern.wide(Tile {
                                kc,
                                a: APanel { data, row0, cs },
                                b: BStrip { data: bw, ldb },
                                dst: DstBlock {
                                    data: &mut *dst,
                                    ldd: ldy,
                                    nrows,
                                    ncols: w,
                                    load: !first,
                                },
                                tail,
                            });
                        if !wide {
                            for (r, row) in rows.iter_mut().enumerate() {
                                *row = a.row(ir + r.min(nrows - 1)) + pc * a.cs();
                            }
                            for jt in (0..w).step_by(nr) {
                                let (Some(bt), Some(dt)) = (bw.get(jt..), dst.get_mut(jt..)) else {
                                    debug_assert!(false, "product: B or Y short of a wide tile");
                                    return;
                                };
                                let ncols = nr.min(w - jt);
                                tile(
                                    kern,
                                    Tile {
                                        kc,
                                        a: ARows { data, rows, cs },
                                        b: BStrip { data: bt, ldb },
                                        dst: DstBlock {
                                            data: dt,
                                            ldd: ldy,
                                            nrows,
                                            ncols,
                                            load: !first,
                                        },
                                        tail: tail.map(|t| Tail { j0: t.j0 + jt, ..t }),
                                    },
                                );
                            }
                        }
                        j += w;
                    }
                    ir += mr;
                }
                jc += cw;
            }
            ic += mc;
        }
        pc += kc;
    }
}

/// Columns of B read in place that each tile of rows of [`drive_wide`]
/// runs across at once. Measured on Zen 4, B read in place in such chunks
/// against B packed 48 columns at a time, with the sums of each chunk's
/// tiles in one call: 1x1 convolutions 5-25% faster at every depth tried
/// (16->96 at 112x112: 0.71 -> 0.46 ms; 256->128 at 56x56: 2.07 -> 1.90
/// ms), also with rows a multiple of 4 KiB apart; 480 and 6144 columns ran
/// the same as 1920.
pub(in crate::simd) const SWEEP_COLS: usize = 1920;

/// Wide tiles up to which a product of a multiple of [`Micro::WIDE`]
/// columns runs on them (a 14x14 output's 196 = 4 x 49) when it has
/// [`WIDE_ROWS_FROM`] rows or more; other products of that many rows and
/// more columns run on tiles one column narrower (48, three full vectors),
/// the last block on the usual strips. Measured on Zen 4, against strips
/// of [`Micro::NR`] (and a column kernel for the 4 left over at 196): 3-6%
/// faster at 196 columns, 2-4% at 784 and 3136 with a short `k`, the same
/// elsewhere; slower below 96 rows when B must be packed (each packed block
/// serves too few tiles), and at 784 columns and more in blocks of 49 (the
/// extra column's epilogue, done in memory, costs more there than it saves).
/// B read in place takes wide tiles from one tile of rows up: 1x1
/// convolutions of 16 to 64 output channels ran 10-20% faster on them than
/// on strips (96->24 at 112x112: 0.66 -> 0.55 ms).
pub(in crate::simd) const WIDE_UP_TO: usize = 4;

/// See [`WIDE_UP_TO`]: the fewest rows for wide tiles over a packed B.
pub(in crate::simd) const WIDE_ROWS_FROM: usize = 96;

/// One tile of [`drive_buf`], as [`Micro::kernel`] takes it. A tile of
/// `16q + t` columns (`t` small: a 7x7 output's 49 = 32 + 16 + 1, a 14x14
/// one's last 4) runs its last `t` as one vector over the rows when those
/// are adjacent in A.
#[inline(always)]
pub(in crate::simd) fn tile<K: Micro>(kern: K, t: Tile<'_>) {
    let Tile {
        kc,
        a: ARows { data: a, rows, cs },
        b: BStrip { data: b, ldb },
        dst: DstBlock { data: dst, ldd, nrows, ncols, load },
        tail,
    } = t;
    let rest = ncols % 16;
    // A whole tile of a few columns, when its sums are long enough to repay
    // the column kernel's epilogue in memory.
    let split = (ncols > 16 || (ncols == rest && kc >= COLUMNS_ALONE_FROM))
        && rest > 0
        && rest <= K::COLS
        && rows.iter().take(nrows).enumerate().all(|(r, &v)| v == rows[0] + r);
    let mut main = ncols;
    if split {
        let j = ncols - rest;
        let done = match (b.get(j..), dst.get_mut(j..)) {
            (Some(bt), Some(dt)) => kern.columns(Tile {
                kc,
                a: APanel { data: a, row0: rows[0], cs },
                b: BStrip { data: bt, ldb },
                dst: DstBlock { data: dt, ldd, nrows, ncols: rest, load },
                tail: tail.map(|t| Tail { j0: t.j0 + j, ..t }),
            }),
            _ => false,
        };
        if done {
            main = j;
        }
    }
    if main > 0 {
        let a = ARows { data: a, rows, cs };
        let b = BStrip { data: b, ldb };
        let dst = DstBlock { data: dst, ldd, nrows, ncols: main, load };
        kern.kernel(Tile { kc, a, b, dst, tail });
    }
}

/// Steps of `k` from which a tile of at most [`Micro::COLS`] columns runs
/// on the column kernel alone (a 14x14 output's last 4 columns; a 1x1
/// output's single column with a short `k` is faster on the row kernel).
pub(in crate::simd) const COLUMNS_ALONE_FROM: usize = 64;

/// The most strips that cover every column of a product for [`drive_buf`]
/// to shorten its blocks of `k` so they are packed at once (4: blocks of at
/// least 64 steps).
pub(in crate::simd) const WHOLE_STRIPS: usize = 4;

/// The most floats of a B (`k x n`) that kernels reading B in place for
/// any number of rows read there rather than from packed strips: 256 KiB,
/// half of Zen 3's L2.
pub(in crate::simd) const B_IN_L2: usize = 64 * 1024;

/// The most strips [`drive_buf`] packs as one block (a product with `k` of
/// 16 or less fills its buffer with this many 32-wide strips).
pub(in crate::simd) const MAX_GROUP: usize = 16;

/// Checks the operands, then runs [`drive_buf`] with a strip buffer of
/// 256 steps of `k` for the kernel's width, compiled for its instruction set.
#[allow(clippy::too_many_arguments)]
pub(in crate::simd) fn drive<K: Micro, A: ReadA, B: PackB>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &Epilogue<'_>,
) -> crate::Result {
    use crate::{Error, ensure};
    if m == 0 || n == 0 {
        return Ok(());
    }
    let y_need = (m - 1).checked_mul(out.ldy).and_then(|v| v.checked_add(n));
    ensure(out.ldy >= n && y_need.is_some_and(|v| v <= out.y.len()), Error::ShapeMismatch)?;
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                out.y[i * out.ldy + j] = epi.one(i, j, 0.0);
            }
        }
        return Ok(());
    }
    ensure(a.fits(m, k), Error::ShapeMismatch)?;
    ensure(K::MR <= MAX_MR && K::NR <= 32, Error::InvalidParams)?;
    // A small output (in L1 or close) takes its smooth activation in one
    // pass at the end rather than one call per tile.
    let whole = epi.smooth.filter(|_| m.saturating_mul(n) <= SMOOTH_WHOLE);
    let tiles = Epilogue { smooth: epi.smooth.filter(|_| whole.is_none()), ..*epi };
    let epi = &tiles;
    let Out { y, ldy } = out;
    kern.run_body(Driven { kern, m, n, k, a, b, out: Out { y: &mut *y, ldy }, epi });
    if let Some(s) = whole {
        smooth_block(s, y, ldy, m, n);
    }
    Ok(())
}

/// [`drive`]'s product as a body compiled for the kernel's ISA
/// ([`Micro::run_body`]), with the strip buffer sized for its `NR`.
struct Driven<'a, 'e, K, A, B> {
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &'a B,
    out: Out<'a>,
    epi: &'e Epilogue<'e>,
}

impl<K: Micro, A: ReadA, B: PackB> Vectorize for Driven<'_, '_, K, A, B> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Driven { kern, m, n, k, a, b, out, epi } = self;
        if K::NR <= 4 {
            drive_buf::<K, A, B, { 256 * 4 }>(kern, m, n, k, a, b, out, epi);
        } else if K::NR <= 8 {
            drive_buf::<K, A, B, { 256 * 8 }>(kern, m, n, k, a, b, out, epi);
        } else if K::NR <= 16 {
            drive_buf::<K, A, B, { 256 * 16 }>(kern, m, n, k, a, b, out, epi);
        } else {
            drive_buf::<K, A, B, { 256 * 32 }>(kern, m, n, k, a, b, out, epi);
        }
    }
}

/// Outputs up to which a product's smooth activation runs once over the
/// whole output (16 KiB of f32) instead of tile by tile.
pub(in crate::simd) const SMOOTH_WHOLE: usize = 4096;

/// `Y[i, j] = epi(i, j, sum_p A(i, p) B(p, j))` on the best kernel for this CPU.
/// The B packer must cover `k x n`.
pub(crate) fn product<A: ReadA, B: PackB>(
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &Epilogue<'_>,
) -> crate::Result {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(kern) = avx512::Avx512::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(kern) = avx2::Avx2::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(kern) = neon::Neon::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    drive(portable_kernel(), m, n, k, a, b, out, epi)
}

/// A matrix-vector product `y[j] = epi(0, j, sum_p a[p] B(p, j))` with B
/// dense: `B(p, j)` at `data[p * rs + j * cs]`. Rows of B (`cs == 1`) are
/// added one after another, each output summing in ascending `p`; columns
/// of B (`rs == 1`) are dot products.
pub(crate) fn vector_product(
    n: usize,
    k: usize,
    a: ViewA<'_>,
    b: &DenseB<'_>,
    y: &mut [f32],
    epi: &Epilogue<'_>,
) -> crate::Result {
    use crate::{Error, ensure};
    let Some(y) = y.get_mut(..n) else { return Err(Error::ShapeMismatch) };
    y.fill(0.0);
    if k == 0 || n == 0 {
        epi.vector_row(y);
        return Ok(());
    }
    // A's row, contiguous: `ViewA` with `cs == 1`.
    ensure(a.cs == 1, Error::InvalidParams)?;
    let av = a.data.get(a.off..a.off + k).ok_or(Error::ShapeMismatch)?;
    let b_last = (k - 1).checked_mul(b.rs).and_then(|v| v.checked_add((n - 1).checked_mul(b.cs)?));
    ensure(b_last.is_some_and(|v| v < b.data.len()), Error::ShapeMismatch)?;
    if b.cs == 1 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        let fast = avx2::Avx2::detect();
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(f) = fast {
            f.axpy_rows(av, b.data, b.rs, y);
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        let fast: Option<()> = None;
        if fast.is_none() {
            for (p, &x) in av.iter().enumerate() {
                let row = &b.data[p * b.rs..p * b.rs + n];
                for (v, &w) in y.iter_mut().zip(row) {
                    *v += x * w;
                }
            }
        }
    } else if b.rs == 1 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        let fast = avx2::Avx2::detect();
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(f) = avx512::Avx512::detect() {
            f.dots(av, b.data, b.cs, y);
        } else if let Some(f) = fast {
            f.dots(av, b.data, b.cs, y);
        }
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        let fast = neon::Neon::detect();
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        if let Some(f) = fast {
            f.dots(av, b.data, b.cs, y);
        }
        #[cfg(not(any(
            all(target_arch = "x86_64", target_feature = "sse2"),
            all(target_arch = "aarch64", target_feature = "neon")
        )))]
        let fast: Option<()> = None;
        if fast.is_none() {
            for (j, v) in y.iter_mut().enumerate() {
                let col = &b.data[j * b.cs..j * b.cs + k];
                let mut s = 0.0f32;
                for (x, w) in av.iter().zip(col) {
                    s += x * w;
                }
                *v = s;
            }
        }
    } else {
        return Err(Error::InvalidParams);
    }
    if !epi.is_identity() {
        epi.vector_row(y);
    }
    Ok(())
}

/// A row times a B laid out in strips: `y[j] = epi(0, j, sum_p a[p] B(p, j))`
/// for `j < n`, each output summing in ascending `p`. A strip's 32 sums stay
/// in registers over all of `k`.
pub(crate) fn strips_vector_product(
    n: usize,
    a: &[f32],
    b: &StripsB<'_>,
    y: &mut [f32],
    epi: &Epilogue<'_>,
) -> crate::Result {
    use crate::{Error, ensure};
    let k = b.k;
    let Some(y) = y.get_mut(..n) else { return Err(Error::ShapeMismatch) };
    let need = n.div_ceil(STRIP).checked_mul(STRIP).and_then(|v| v.checked_mul(k));
    ensure(a.len() == k && need.is_some_and(|v| v <= b.data.len()), Error::ShapeMismatch)?;
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(f) = avx512::Avx512::detect() {
        f.strips_row(a, b.data, y);
        if !epi.is_identity() {
            epi.vector_row(y);
        }
        return Ok(());
    }
    y.fill(0.0);
    struct Body<'a> {
        a: &'a [f32],
        strips: &'a [f32],
        k: usize,
        y: &'a mut [f32],
    }
    impl Vectorize for Body<'_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            let len = (STRIP * self.k).max(1);
            for (yc, strip) in self.y.chunks_mut(STRIP).zip(self.strips.chunks(len)) {
                let mut acc = [0.0f32; STRIP];
                for (x, row) in self.a.iter().zip(strip.chunks_exact(STRIP)) {
                    for (s, w) in acc.iter_mut().zip(row) {
                        *s += x * w;
                    }
                }
                yc.copy_from_slice(&acc[..yc.len()]);
            }
        }
    }
    vectorize(Body { a, strips: b.data, k, y: &mut *y });
    if !epi.is_identity() {
        epi.vector_row(y);
    }
    Ok(())
}

/// [`product`] with the portable kernel forced, for tests comparing paths.
#[cfg(test)]
pub(crate) fn product_portable<A: ReadA, B: PackB>(
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &Epilogue<'_>,
) -> crate::Result {
    drive(crate::simd::gemm::micro::portable::exact_kernel(), m, n, k, a, b, out, epi)
}
