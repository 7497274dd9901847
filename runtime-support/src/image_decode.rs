//! ImageDecoder (feature `image`, which needs `std`): encoded bytes (BMP,
//! JPEG, JPEG 2000, PNG, PNM, TIFF, WebP) to `uint8` pixels, height x width x
//! channels, with pure-Rust codecs: the `image` crate's, and `hayro-jpeg2000`
//! for JPEG 2000.
//!
//! The output's shape depends on the data; generated code plans it from the
//! model's declaration and this kernel checks the decoded size against it.
//! Grayscale is computed from the decoded RGB with ITU-R 601 luma weights in
//! 16-bit fixed point, rounded: `(19595 R + 38470 G + 7471 B + 2^15) >> 16`,
//! the conversion the ONNX reference (Pillow's `convert("L")`) performs.

use crate::{Error, Result, ensure};

/// The channel order of the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelFormat {
    /// Red, green, blue.
    Rgb,
    /// Blue, green, red.
    Bgr,
    /// One luma channel.
    Grayscale,
}

impl PixelFormat {
    /// Channels per pixel.
    pub const fn channels(self) -> usize {
        match self {
            PixelFormat::Rgb | PixelFormat::Bgr => 3,
            PixelFormat::Grayscale => 1,
        }
    }
}

/// Decodes `data` into `out`, which holds `shape` = `[height, width,
/// channels]` bytes. [`Error::Malformed`] if no codec decodes the data,
/// [`Error::ShapeMismatch`] if the image's size is not the planned one.
pub fn decode(format: PixelFormat, shape: [usize; 3], data: &[u8], out: &mut [u8]) -> Result {
    let [h, w, c] = shape;
    ensure(c == format.channels(), Error::InvalidParams)?;
    let n = h.checked_mul(w).and_then(|p| p.checked_mul(c)).ok_or(Error::Overflow)?;
    ensure(out.len() == n, Error::ShapeMismatch)?;
    // The header's size is checked before decoding, so hostile data cannot
    // make the decoder allocate more than the planned image.
    let planned = |height: u32, width: u32| {
        let same =
            usize::try_from(height).ok() == Some(h) && usize::try_from(width).ok() == Some(w);
        ensure(same, Error::ShapeMismatch)
    };
    let rgb = if is_jpeg2000(data) {
        decode_jpeg2000(data, planned)?
    } else {
        let reader = || {
            image::ImageReader::new(std::io::Cursor::new(data))
                .with_guessed_format()
                .map_err(|_| Error::Malformed)
        };
        let (width, height) = reader()?.into_dimensions().map_err(|_| Error::Malformed)?;
        planned(height, width)?;
        reader()?.decode().map_err(|_| Error::Malformed)?.into_rgb8().into_raw()
    };
    ensure(rgb.len() % 3 == 0 && rgb.len() / 3 == n / c, Error::ShapeMismatch)?;
    let pixels = rgb.chunks_exact(3);
    match format {
        PixelFormat::Rgb => {
            for (o, p) in out.chunks_exact_mut(3).zip(pixels) {
                o.copy_from_slice(p);
            }
        }
        PixelFormat::Bgr => {
            for (o, p) in out.chunks_exact_mut(3).zip(pixels) {
                o[0] = p[2];
                o[1] = p[1];
                o[2] = p[0];
            }
        }
        PixelFormat::Grayscale => {
            for (o, p) in out.iter_mut().zip(pixels) {
                *o = luma(p[0], p[1], p[2]);
            }
        }
    }
    Ok(())
}

/// Whether `data` starts like a JPEG 2000 file (the JP2 signature box) or
/// codestream (SOC then SIZ markers).
fn is_jpeg2000(data: &[u8]) -> bool {
    data.starts_with(b"\0\0\0\x0cjP  \r\n\x87\n") || data.starts_with(&[0xff, 0x4f, 0xff, 0x51])
}

/// A JPEG 2000 image as RGB bytes (gray replicated, alpha dropped), after
/// `planned(height, width)` accepted its size; [`Error::Malformed`] for
/// other colour layouts.
fn decode_jpeg2000(data: &[u8], planned: impl Fn(u32, u32) -> Result) -> Result<Vec<u8>> {
    let settings = hayro_jpeg2000::DecodeSettings::default();
    let image = hayro_jpeg2000::Image::new(data, &settings).map_err(|_| Error::Malformed)?;
    planned(image.height(), image.width())?;
    let colours = usize::from(image.color_space().num_channels());
    ensure(matches!(colours, 1 | 3), Error::Malformed)?;
    let channels = colours + usize::from(image.has_alpha());
    let bytes = image.decode().map_err(|_| Error::Malformed)?;
    let mut rgb = Vec::with_capacity(bytes.len() / channels * 3);
    for px in bytes.chunks_exact(channels) {
        match px {
            [g, ..] if colours == 1 => rgb.extend_from_slice(&[*g, *g, *g]),
            [r, g, b, ..] => rgb.extend_from_slice(&[*r, *g, *b]),
            _ => return Err(Error::Malformed),
        }
    }
    Ok(rgb)
}

/// ITU-R 601 luma in 16-bit fixed point, rounded.
fn luma(r: u8, g: u8, b: u8) -> u8 {
    let y = 19595 * u32::from(r) + 38470 * u32::from(g) + 7471 * u32::from(b) + 0x8000;
    // The weights sum to 2^16, so `y >> 16` is at most 255.
    u8::try_from(y >> 16).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2 x 1 24-bit BMP: a red pixel then a blue one (bottom-up rows,
    /// BGR bytes, rows padded to 4 bytes).
    fn bmp() -> Vec<u8> {
        let mut b = Vec::new();
        let pixels: [u8; 8] = [0, 0, 255, 255, 0, 0, 0, 0];
        let size = 14 + 40 + pixels.len() as u32;
        b.extend_from_slice(b"BM");
        b.extend_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&54u32.to_le_bytes());
        b.extend_from_slice(&40u32.to_le_bytes());
        b.extend_from_slice(&2i32.to_le_bytes());
        b.extend_from_slice(&1i32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&24u16.to_le_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&(pixels.len() as u32).to_le_bytes());
        b.extend_from_slice(&[0; 16]);
        b.extend_from_slice(&pixels);
        b
    }

    #[test]
    fn decodes_in_each_pixel_format() {
        let data = bmp();
        let mut rgb = [0u8; 6];
        decode(PixelFormat::Rgb, [1, 2, 3], &data, &mut rgb).unwrap();
        assert_eq!(rgb, [255, 0, 0, 0, 0, 255]);
        let mut bgr = [0u8; 6];
        decode(PixelFormat::Bgr, [1, 2, 3], &data, &mut bgr).unwrap();
        assert_eq!(bgr, [0, 0, 255, 255, 0, 0]);
        let mut gray = [0u8; 2];
        decode(PixelFormat::Grayscale, [1, 2, 1], &data, &mut gray).unwrap();
        // 255 * 19595 / 65536 and 255 * 7471 / 65536, rounded.
        assert_eq!(gray, [76, 29]);
    }

    #[test]
    fn refuses_other_sizes_and_garbage() {
        let mut out = [0u8; 12];
        assert_eq!(
            decode(PixelFormat::Rgb, [2, 2, 3], &bmp(), &mut out),
            Err(Error::ShapeMismatch)
        );
        let mut out = [0u8; 6];
        assert_eq!(
            decode(PixelFormat::Rgb, [1, 2, 3], b"not an image", &mut out),
            Err(Error::Malformed)
        );
    }
}
