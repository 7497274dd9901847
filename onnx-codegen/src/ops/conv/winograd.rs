//! When a convolution pays to run by Winograd's F(2x2, 3x3): the measured
//! thresholds and the block size the kernel runs with. The pass that
//! transforms the weights (`passes::optimize::winograd_convs`) asks
//! [`choose_block`]; the rule then reads the choice from the node's
//! [`ConvWeights::Winograd`](crate::ir::lowering::ConvWeights).

use onnx_codegen_runtime::winograd::{MAX_BLOCK, scratch_len, tiles_of, weights_len};

/// The tiles per block a 3x3 stride-1 f32 convolution of `c` input and `m`
/// output channels at an `oh x ow` output runs with by Winograd, when it
/// pays and its scratch fits in `room` free arena bytes (less an
/// alignment's slack); `None` when the convolution stays direct.
pub fn choose_block(c: usize, m: usize, oh: usize, ow: usize, room: usize) -> Option<usize> {
    let wide = m.min(c) >= WINOGRAD_MIN_CHANNELS && oh.min(ow) >= WINOGRAD_MIN_OUT;
    if !wide {
        return None;
    }
    let tiles = tiles_of(oh, ow)?;
    let u_bytes = weights_len(c, m).and_then(|v| v.checked_mul(4)).unwrap_or(usize::MAX);
    if tiles < WINOGRAD_FEW_TILES && u_bytes > WINOGRAD_FEW_TILES_MAX_BYTES {
        return None;
    }
    if winograd_min_tiles(m, c).is_none_or(|least| tiles < least) {
        return None;
    }
    let room = room.saturating_sub(onnx_codegen_runtime::arena::ARENA_ALIGN);
    let bytes = |t: usize| scratch_len(c, m, t).and_then(|v| v.checked_mul(4));
    let (fixed, one) = (bytes(0)?, bytes(1)?);
    let fit = room.saturating_sub(fixed) / (one - fixed).max(1);
    let most = fit.min(MAX_BLOCK).min(tiles);
    if most < WINOGRAD_MIN_BLOCK.min(tiles) || most == 0 {
        return None;
    }
    Some(winograd_block(tiles, ow.div_ceil(2), most))
}

/// Fewest input and output channels a 3x3 Conv needs before
/// the Winograd pass (`passes::optimize::winograd_convs`) claims it: below, the 16 small products and the
/// transforms cost more than the implicit GEMM saves (measured on Zen 4
/// with the AVX-512 transforms: 8->8 and 12->12 at 56x56 5-20% slower).
pub const WINOGRAD_MIN_CHANNELS: usize = 16;

/// The fewest tiles (2x2 outputs each) for which the Winograd pass (`passes::optimize::winograd_convs`) claims a
/// Conv of `m` output and `c` input channels: the transforms cost per
/// channel and tile, the products per pair of channels and tile, and the
/// per-block costs per tile, so the fewer the channel pairs, the more tiles
/// are needed. `None`: never. Measured on Zen 4 (AVX-512 transforms),
/// Winograd against the implicit GEMM: `m * c` of 256 (16->16) 0.047 against
/// 0.054 ms at 32x32 (256 tiles), 0.020 against 0.018 at 16x16, 0.58
/// against 0.64 at 112x112; 1024 (32->32, 16->64) 0.038 against 0.051 at
/// 16x16, 0.034 against 0.043 at 14x14, even at 7x7; 4096 (64->64,
/// 128->32) 0.046 against 0.068 at 8x8, 0.035 against 0.072 at 7x7, 0.021
/// against 0.019 at 4x4.
pub fn winograd_min_tiles(m: usize, c: usize) -> Option<usize> {
    match m.saturating_mul(c) {
        mc if mc >= 4096 => Some(16),
        mc if mc >= 1024 => Some(25),
        mc if mc >= 256 => Some(196),
        _ => None,
    }
}

/// Fewest output rows and columns a 3x3 Conv needs before the Winograd pass (`passes::optimize::winograd_convs`)
/// claims it (fewer than two full tiles a side waste most of each tile).
pub const WINOGRAD_MIN_OUT: usize = 4;

/// Below this many tiles, each transformed weight is used too few times to
/// pay for reading it from memory: the Winograd pass (`passes::optimize::winograd_convs`) then only claims a
/// Conv whose transformed weights are at most
/// [`WINOGRAD_FEW_TILES_MAX_BYTES`]. Measured with the AVX-512 transforms:
/// ResNet-18, whose three 512->512 Convs at 7x7 (16 tiles, 16.8 MB of
/// transformed weights each, read from memory) ran direct under a limit
/// of 8 MB, 26.8 -> 25.6 ms with them by Winograd (1.9 against 2.4 ms
/// each with the weights in cache). With the plain transforms, Winograd
/// was the slower there (2.14 against 1.61 ms).
pub const WINOGRAD_FEW_TILES: usize = 20;

/// See [`WINOGRAD_FEW_TILES`]: twice the largest such layer of the usual
/// CNNs, a guard against far larger ones.
pub const WINOGRAD_FEW_TILES_MAX_BYTES: usize = 32 << 20;

/// Fewest tiles per block the Winograd pass (`passes::optimize::winograd_convs`) accepts: fewer leave the
/// micro-kernel's 8-row tiles mostly empty.
const WINOGRAD_MIN_BLOCK: usize = 8;

/// Tiles per block of a Winograd convolution of `tiles` tiles, `row` to a
/// row of tiles, when the scratch holds `most` (at least 1). Blocks of even
/// size: 49 tiles as 25 + 24 rather than 32 + 17. When more than one block
/// is needed, a block is then whole rows of tiles, or else a multiple of
/// 16 tiles (the vector transforms' step), if that fits: the transforms
/// then never split a step between two blocks, and the products' columns
/// fill their strips. ResNet-8's 16->16 at 32x32 (16 tiles a row) with
/// room for 55: blocks of 52 took 0.051 ms, of 48 0.045 (Zen 4).
pub fn winograd_block(tiles: usize, row: usize, most: usize) -> usize {
    let even = tiles.div_ceil(tiles.div_ceil(most.max(1)));
    if even >= tiles {
        return tiles;
    }
    let unit = if row <= most { row } else { 16 };
    if unit > most {
        return even;
    }
    let up = even.div_ceil(unit) * unit;
    if up <= most { up } else { even / unit * unit }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn winograd_blocks_are_even_whole_rows_or_steps_of_16() {
        // One block when the scratch holds every tile.
        assert_eq!(winograd_block(49, 7, 128), 49);
        assert_eq!(winograd_block(49, 7, 49), 49);
        // Whole rows: 256 tiles of 16 a row in room for 55 -> 48, not 52.
        assert_eq!(winograd_block(256, 16, 55), 48);
        // Even blocks already whole rows stay (784 of 28 a row: 7 x 112).
        assert_eq!(winograd_block(784, 28, 128), 112);
        // Rounded up to whole rows when that fits: 49 of 7 in room for 32 -> 28.
        assert_eq!(winograd_block(49, 7, 32), 28);
        // Rows wider than the room: steps of 16 (3136 of 56 a row, room 40).
        assert_eq!(winograd_block(3136, 56, 40), 32);
        // Room for fewer than 16: the even split.
        assert_eq!(winograd_block(100, 50, 12), 12);
        assert_eq!(winograd_block(30, 50, 7), 6);
        for tiles in 1..300 {
            for row in 1..40 {
                for most in 1..140 {
                    let b = winograd_block(tiles, row, most);
                    assert!(b >= 1 && b <= most.max(1).min(tiles), "{tiles} {row} {most}: {b}");
                }
            }
        }
    }
}
