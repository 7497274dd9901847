//! Activations with parameters (Shrink, Celu, Swish, Mish), PRelu, LRN,
//! MaxUnpool and the training optimizers of `ai.onnx.preview.training`
//! (Momentum, Adagrad, Adam), and the random generators (RandomUniform,
//! RandomNormal, their `Like` forms, Bernoulli) over a seeded deterministic
//! generator: a given seed gives the same numbers on every run and every
//! platform (not numpy's stream), and Dropout's training mask, drawn from
//! numpy's legacy stream ([`Mt19937`]) so that it matches the reference.
//!
//! Float math runs in `f64` and rounds once per output element, as the
//! reference does for `f32` tensors.

use crate::num::{Flag, Float, Int, Num};
use crate::shape::{MAX_RANK, check_strided, numel, walk};
use crate::{Error, Result, ensure};

/// An element-wise activation with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Act {
    /// `x + bias` below `-lambd`, `x - bias` above `lambd`, 0 between.
    Shrink { lambd: f64, bias: f64 },
    /// `max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`.
    Celu { alpha: f64 },
    /// `x * sigmoid(alpha * x)`.
    Swish { alpha: f64 },
    /// `x * tanh(ln(1 + exp(x)))`.
    Mish,
}

impl Act {
    /// The function at one point.
    pub fn apply(self, x: f64) -> f64 {
        match self {
            Act::Shrink { lambd, bias } => {
                if x < -lambd {
                    x + bias
                } else if x > lambd {
                    x - bias
                } else {
                    0.0
                }
            }
            Act::Celu { alpha } => x.max(0.0) + (alpha * (libm::exp(x / alpha) - 1.0)).min(0.0),
            Act::Swish { alpha } => x / (1.0 + libm::exp(-alpha * x)),
            Act::Mish => x * libm::tanh(libm::log1p(libm::exp(x))),
        }
    }
}

/// Applies `op` to every element of `x` into `y`.
pub fn activation<T: Float>(op: Act, x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = T::from_f64(op.apply(v.to_f64()));
    }
    Ok(())
}

/// ONNX `PRelu`: `y = x < 0 ? slope * x : x`, with `slope` read through
/// `slope_strides` (its broadcast to `shape`, 0 on broadcast axes).
pub fn prelu<T: Float>(
    shape: &[usize],
    slope_strides: &[isize],
    x: &[T],
    slope: &[T],
    y: &mut [T],
) -> Result {
    let n = numel(shape)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    ensure(slope_strides.len() == shape.len(), Error::InvalidParams)?;
    check_strided(shape, slope_strides, 0, slope.len())?;
    let mut i = 0usize;
    let zero = T::from_f64(0.0);
    walk(shape, [slope_strides], [0], |[s]| {
        if let (Some(&v), Some(&a), Some(o)) = (x.get(i), slope.get(s), y.get_mut(i)) {
            *o = if v < zero { a.mul(v) } else { v };
        }
        i += 1;
    });
    Ok(())
}

/// LRN params: `x` seen as `[batch, channels, spatial]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lrn {
    pub batch: usize,
    pub channels: usize,
    pub spatial: usize,
    pub size: usize,
    pub alpha: f64,
    pub beta: f64,
    pub bias: f64,
}

/// ONNX `LRN`: `y = x / (bias + alpha / size * square_sum) ^ beta`, the
/// sum over the channels `[c - floor((size-1)/2), c + ceil((size-1)/2)]`.
pub fn lrn<T: Float>(p: &Lrn, x: &[T], y: &mut [T]) -> Result {
    let n = p
        .batch
        .checked_mul(p.channels)
        .and_then(|v| v.checked_mul(p.spatial))
        .ok_or(Error::Overflow)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    ensure(p.size > 0, Error::InvalidParams)?;
    let before = (p.size - 1) / 2;
    let after = p.size / 2;
    let scale = p.alpha / p.size as f64;
    for b in 0..p.batch {
        for c in 0..p.channels {
            let lo = c.saturating_sub(before);
            let hi = (c + after).min(p.channels - 1);
            for s in 0..p.spatial {
                let mut sum = 0.0f64;
                for k in lo..=hi {
                    let v = x[(b * p.channels + k) * p.spatial + s].to_f64();
                    sum += v * v;
                }
                let i = (b * p.channels + c) * p.spatial + s;
                let d = libm::pow(p.bias + scale * sum, p.beta);
                y[i] = T::from_f64(x[i].to_f64() / d);
            }
        }
    }
    Ok(())
}

/// ONNX `MaxUnpool`: `y` (of shape `out`) is zero but for `x`'s values,
/// each placed at its index, a flat position in a tensor of shape
/// `inferred` (the default output shape) whose elements sit at the same
/// multi-index of `out` (every dim of `out` at least `inferred`'s).
pub fn max_unpool<T: Float, I: Int>(
    inferred: &[usize],
    out: &[usize],
    x: &[T],
    indices: &[I],
    y: &mut [T],
) -> Result {
    ensure(inferred.len() == out.len() && out.len() <= MAX_RANK, Error::InvalidParams)?;
    ensure(inferred.iter().zip(out).all(|(a, b)| a <= b), Error::InvalidParams)?;
    ensure(x.len() == indices.len(), Error::ShapeMismatch)?;
    let total = numel(inferred)?;
    ensure(y.len() == numel(out)?, Error::ShapeMismatch)?;
    y.fill(T::from_f64(0.0));
    for (&v, &i) in x.iter().zip(indices) {
        let flat = i.to_i64().and_then(|i| usize::try_from(i).ok());
        let mut flat = match flat {
            Some(f) if f < total => f,
            _ => return Err(Error::IndexOutOfBounds),
        };
        let mut idx = [0usize; MAX_RANK];
        for d in (0..inferred.len()).rev() {
            idx[d] = flat % inferred[d];
            flat /= inferred[d];
        }
        let mut o = 0usize;
        for d in 0..out.len() {
            o = o * out[d] + idx[d];
        }
        if let Some(slot) = y.get_mut(o) {
            *slot = v;
        }
    }
    Ok(())
}

/// Checks that run-time shape values (MaxUnpool's `output_shape`) are the
/// dims planned at generation time.
pub fn check_dims<I: Int>(values: &[I], dims: &[usize]) -> Result {
    ensure(values.len() == dims.len(), Error::ShapeMismatch)?;
    for (v, &d) in values.iter().zip(dims) {
        let v = v.to_i64().and_then(|v| usize::try_from(v).ok());
        ensure(v == Some(d), Error::ShapeMismatch)?;
    }
    Ok(())
}

/// Training optimizer hyper-parameters, as in `ai.onnx.preview.training`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// Momentum; `nesterov` selects its Nesterov form.
    Momentum {
        alpha: f64,
        beta: f64,
        norm_coefficient: f64,
        nesterov: bool,
    },
    Adagrad {
        decay_factor: f64,
        epsilon: f64,
        norm_coefficient: f64,
    },
    Adam {
        alpha: f64,
        beta: f64,
        epsilon: f64,
        norm_coefficient: f64,
        norm_coefficient_post: f64,
    },
}

/// One optimizer step for one tensor: `r` is the learning rate, `t` the
/// update count; `x`, `g` and the state `s1` (Momentum's and Adam's `V`,
/// Adagrad's `H`) and `s2` (Adam's `H`; empty otherwise) have one length.
/// Writes the new `x` to `x_new`, the new states to `s1_new` and `s2_new`
/// (each may be empty when the model does not ask for it).
#[allow(clippy::too_many_arguments)]
pub fn optimizer_step<T: Float>(
    op: Optimizer,
    r: f64,
    t: i64,
    x: &[T],
    g: &[T],
    s1: &[T],
    s2: &[T],
    x_new: &mut [T],
    s1_new: &mut [T],
    s2_new: &mut [T],
) -> Result {
    let n = x.len();
    ensure(g.len() == n && s1.len() == n, Error::ShapeMismatch)?;
    ensure(x_new.len() == n || x_new.is_empty(), Error::ShapeMismatch)?;
    ensure(s1_new.len() == n || s1_new.is_empty(), Error::ShapeMismatch)?;
    let adam = matches!(op, Optimizer::Adam { .. });
    if adam {
        ensure(s2.len() == n && (s2_new.len() == n || s2_new.is_empty()), Error::ShapeMismatch)?;
    }
    let tf = t as f64;
    for i in 0..n {
        let (xv, gv, s1v) = (x[i].to_f64(), g[i].to_f64(), s1[i].to_f64());
        let (xn, s1n, s2n) = match op {
            Optimizer::Momentum { alpha, beta, norm_coefficient, nesterov } => {
                let gr = norm_coefficient * xv + gv;
                let beta_adj = if t > 0 { beta } else { 1.0 };
                let v = alpha * s1v + beta_adj * gr;
                let xn = if nesterov { xv - r * (gr + alpha * v) } else { xv - r * v };
                (xn, v, 0.0)
            }
            Optimizer::Adagrad { decay_factor, epsilon, norm_coefficient } => {
                let rr = r / (1.0 + tf * decay_factor);
                let gr = norm_coefficient * xv + gv;
                let h = s1v + gr * gr;
                let xn = xv - rr * gr / (libm::sqrt(h) + epsilon);
                (xn, h, 0.0)
            }
            Optimizer::Adam { alpha, beta, epsilon, norm_coefficient, norm_coefficient_post } => {
                let hv = s2[i].to_f64();
                let gr = norm_coefficient * xv + gv;
                let v = alpha * s1v + (1.0 - alpha) * gr;
                let h = beta * hv + (1.0 - beta) * gr * gr;
                let hs = libm::sqrt(h) + epsilon;
                let rr = if t > 0 {
                    r * libm::sqrt(1.0 - libm::pow(beta, tf)) / (1.0 - libm::pow(alpha, tf))
                } else {
                    r
                };
                let xn = xv - rr * v / hs;
                (xn * (1.0 - norm_coefficient_post), v, h)
            }
        };
        if let Some(o) = x_new.get_mut(i) {
            *o = T::from_f64(xn);
        }
        if let Some(o) = s1_new.get_mut(i) {
            *o = T::from_f64(s1n);
        }
        if let Some(o) = s2_new.get_mut(i) {
            *o = T::from_f64(s2n);
        }
    }
    Ok(())
}

/// The seed used when a node has none: the spec leaves it to the
/// implementation; a fixed one keeps generated models deterministic.
pub const DEFAULT_SEED: u64 = 0x853c_49e6_748f_ea9b;

/// SplitMix64: a small, fast, well-mixed deterministic generator.
#[derive(Clone, Copy, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform sample in `[0, 1)` with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Words of Mersenne Twister state.
const MT_N: usize = 624;
/// The twist's middle offset.
const MT_M: usize = 397;

/// MT19937, the 32-bit Mersenne Twister, seeded as numpy's legacy
/// `RandomState` seeds it, so Dropout's training mask reproduces the
/// reference's `np.random.seed(seed); np.random.uniform(0, 1, shape)`
/// bit for bit.
///
/// The state is 624 words (2.5 KB). Kernels build it on their own stack for
/// the duration of one call rather than keeping it in the model struct:
/// the ONNX ops re-seed on every run, so no state outlives a call, and a
/// model without random ops pays nothing. On small targets (Cortex-M)
/// those 2.5 KB of stack during a training-mode Dropout must be budgeted.
#[derive(Clone, Debug)]
pub struct Mt19937 {
    state: [u32; MT_N],
    /// The next state word to temper; `MT_N` means a twist is due.
    pos: usize,
}

impl Mt19937 {
    /// numpy's seeding for an integer seed. A seed that fits in 32 bits
    /// uses the reference initialisation (`init_genrand`), as
    /// `np.random.seed(seed)` does; a wider one (numpy refuses those) is
    /// fed as the two words `[low, high]` to the array initialisation
    /// (`init_by_array`), as `np.random.seed([low, high])` does, so every
    /// 64-bit seed gives its own stream.
    pub fn new(seed: u64) -> Mt19937 {
        match u32::try_from(seed) {
            Ok(s) => Mt19937::from_u32(s),
            Err(_) => Mt19937::from_words(&[seed as u32, (seed >> 32) as u32]),
        }
    }

    /// The reference initialisation from one 32-bit seed.
    pub fn from_u32(seed: u32) -> Mt19937 {
        let mut state = [0u32; MT_N];
        let mut prev = seed;
        for (i, w) in state.iter_mut().enumerate() {
            if i > 0 {
                prev = 1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)).wrapping_add(i as u32);
            }
            *w = prev;
        }
        Mt19937 { state, pos: MT_N }
    }

    /// The reference array initialisation: the state is seeded with
    /// 19650218, then mixed with `key` (an empty key acts as `[0]`).
    pub fn from_words(key: &[u32]) -> Mt19937 {
        let mut g = Mt19937::from_u32(19_650_218);
        let s = &mut g.state;
        let (mut i, mut j) = (1usize, 0usize);
        let key_len = key.len().max(1);
        for _ in 0..MT_N.max(key_len) {
            let prev = s[i - 1];
            let k = key.get(j).copied().unwrap_or(0);
            s[i] = (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(k)
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= MT_N {
                s[0] = s[MT_N - 1];
                i = 1;
            }
            if j >= key_len {
                j = 0;
            }
        }
        for _ in 0..MT_N - 1 {
            let prev = s[i - 1];
            s[i] =
                (s[i] ^ (prev ^ (prev >> 30)).wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= MT_N {
                s[0] = s[MT_N - 1];
                i = 1;
            }
        }
        s[0] = 0x8000_0000;
        g.pos = MT_N;
        g
    }

    /// Regenerates all 624 words from the previous ones.
    fn twist(&mut self) {
        let s = &mut self.state;
        for i in 0..MT_N {
            let x = (s[i] & 0x8000_0000) | (s[(i + 1) % MT_N] & 0x7fff_ffff);
            let mut xa = x >> 1;
            if x & 1 != 0 {
                xa ^= 0x9908_b0df;
            }
            s[i] = s[(i + MT_M) % MT_N] ^ xa;
        }
        self.pos = 0;
    }

    /// The next 32-bit output.
    pub fn next_u32(&mut self) -> u32 {
        if self.pos >= MT_N {
            self.twist();
        }
        let mut y = self.state.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// numpy's `random_sample`: a double in `[0, 1)` from two outputs,
    /// `((a >> 5) * 2^26 + (b >> 6)) / 2^53`.
    pub fn uniform(&mut self) -> f64 {
        let a = u64::from(self.next_u32() >> 5);
        let b = u64::from(self.next_u32() >> 6);
        ((a << 26) + b) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// How a random kernel draws each element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Dist {
    /// Uniform in `[low, high)`.
    Uniform { low: f64, high: f64 },
    /// Normal (Box-Muller) with a mean and standard deviation.
    Normal { mean: f64, scale: f64 },
}

/// ONNX `RandomUniform(Like)` / `RandomNormal(Like)`: fills `y` from a
/// generator started at `seed`.
pub fn random<T: Float>(dist: Dist, seed: u64, y: &mut [T]) {
    let mut rng = Rng::new(seed);
    for o in y.iter_mut() {
        let v = match dist {
            Dist::Uniform { low, high } => low + (high - low) * rng.uniform(),
            Dist::Normal { mean, scale } => {
                let u1 = 1.0 - rng.uniform();
                let u2 = rng.uniform();
                let r = libm::sqrt(-2.0 * libm::log(u1));
                mean + scale * r * libm::cos(2.0 * core::f64::consts::PI * u2)
            }
        };
        *o = T::from_f64(v);
    }
}

/// ONNX `Bernoulli`: `y[i]` is 1 with probability `p[i]`, else 0.
pub fn bernoulli<P: Float, O: Num>(seed: u64, p: &[P], y: &mut [O]) -> Result {
    ensure(p.len() == y.len(), Error::ShapeMismatch)?;
    let mut rng = Rng::new(seed);
    for (o, &pv) in y.iter_mut().zip(p) {
        *o = O::from_usize(usize::from(rng.uniform() < pv.to_f64()));
    }
    Ok(())
}

/// ONNX `Dropout` in training mode. Each element, in order, draws a uniform
/// sample from an [`Mt19937`] seeded with `seed` (numpy's legacy stream, as
/// the reference's `np.random.uniform(0, 1, shape)` after
/// `np.random.seed(seed)`; its 2.5 KB state lives on this call's stack); where it is at least `ratio` the element
/// is kept and scaled, `y = (1 * x) * (1 / (1 - ratio))` in `T`, elsewhere
/// `y = (0 * x) * scale` (so a dropped negative value is `-0`, as numpy's
/// `mask * x * scale` gives). `mask`, unless empty, receives whether each
/// element was kept. A ratio of 0 keeps everything unchanged, with no draw;
/// a ratio outside `[0, 1)` is [`Error::InvalidParams`].
pub fn dropout_train<T: Float, F: Flag>(
    seed: u64,
    ratio: f64,
    x: &[T],
    y: &mut [T],
    mask: &mut [F],
) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    ensure(mask.is_empty() || mask.len() == x.len(), Error::ShapeMismatch)?;
    ensure((0.0..1.0).contains(&ratio), Error::InvalidParams)?;
    if ratio == 0.0 {
        y.copy_from_slice(x);
        mask.iter_mut().for_each(|m| *m = F::from_bool(true));
        return Ok(());
    }
    let scale = T::from_f64(1.0 / (1.0 - ratio));
    let mut rng = Mt19937::new(seed);
    for (i, (o, &v)) in y.iter_mut().zip(x).enumerate() {
        let keep = rng.uniform() >= ratio;
        *o = T::from_usize(usize::from(keep)).mul(v).mul(scale);
        if let Some(m) = mask.get_mut(i) {
            *m = F::from_bool(keep);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_by_hand() {
        let s = Act::Shrink { lambd: 1.5, bias: 0.5 };
        assert_eq!(
            [s.apply(-2.0), s.apply(-1.0), s.apply(1.5), s.apply(2.0)],
            [-1.5, 0.0, 0.0, 1.5]
        );
        assert_eq!(Act::Celu { alpha: 2.0 }.apply(3.0), 3.0);
        let c = Act::Celu { alpha: 2.0 }.apply(-2.0);
        assert!((c - 2.0 * (libm::exp(-1.0) - 1.0)).abs() < 1e-15);
        assert_eq!(Act::Swish { alpha: 1.0 }.apply(0.0), 0.0);
        assert!((Act::Mish.apply(1.0) - 0.865_098_4).abs() < 1e-6);
    }

    #[test]
    fn prelu_broadcasts_slope() {
        let x = [-1.0f32, 2.0, -3.0, -4.0];
        let mut y = [0.0f32; 4];
        prelu(&[2, 2], &[0, 1], &x, &[0.5, 0.25], &mut y).unwrap();
        assert_eq!(y, [-0.5, 2.0, -1.5, -1.0]);
        assert_eq!(prelu(&[2, 2], &[0, 1], &x, &[0.5], &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn lrn_by_hand() {
        let p =
            Lrn { batch: 1, channels: 2, spatial: 1, size: 2, alpha: 2.0, beta: 1.0, bias: 1.0 };
        let mut y = [0.0f64; 2];
        lrn(&p, &[1.0, 2.0], &mut y).unwrap();
        // Channel 0 sums channels 0..=1 (5), channel 1 only itself (4).
        assert_eq!(y, [1.0 / 6.0, 2.0 / 5.0]);
    }

    #[test]
    fn max_unpool_places_values() {
        let mut y = [9.0f32; 6];
        max_unpool(&[2, 2], &[2, 3], &[1.0, 2.0], &[1i64, 2], &mut y).unwrap();
        assert_eq!(y, [0.0, 1.0, 0.0, 2.0, 0.0, 0.0]);
        assert_eq!(
            max_unpool(&[2, 2], &[2, 3], &[1.0f32], &[4i64], &mut y),
            Err(Error::IndexOutOfBounds)
        );
    }

    #[test]
    fn random_is_deterministic_and_in_range() {
        let (mut a, mut b) = ([0.0f32; 64], [0.0f32; 64]);
        random(Dist::Uniform { low: 2.0, high: 3.0 }, 7, &mut a);
        random(Dist::Uniform { low: 2.0, high: 3.0 }, 7, &mut b);
        assert_eq!(a, b);
        assert!(a.iter().all(|&v| (2.0..=3.0).contains(&v)));
        random(Dist::Uniform { low: 2.0, high: 3.0 }, 8, &mut b);
        assert_ne!(a, b);
        let mut n = [0.0f64; 4000];
        random(Dist::Normal { mean: 1.0, scale: 2.0 }, 1, &mut n);
        let mean = n.iter().sum::<f64>() / 4000.0;
        assert!((mean - 1.0).abs() < 0.2, "{mean}");
        let mut y = [0i32; 3];
        bernoulli(3, &[0.0f32, 1.0, 0.0], &mut y).unwrap();
        assert_eq!(y, [0, 1, 0]);
    }

    #[test]
    fn mt19937_matches_numpy() {
        // Expected values from numpy 2 (legacy RandomState):
        // `np.random.RandomState(s).randint(0, 2**32, 5, dtype=np.uint64)` and
        // `np.random.RandomState(s).random_sample(4)`.
        let mut g = Mt19937::new(5489);
        let got: [u32; 5] = core::array::from_fn(|_| g.next_u32());
        assert_eq!(got, [3_499_211_612, 581_869_302, 3_890_346_734, 3_586_334_585, 545_404_204]);
        let mut g = Mt19937::new(0);
        let got: [u32; 5] = core::array::from_fn(|_| g.next_u32());
        assert_eq!(
            got,
            [2_357_136_044, 2_546_248_239, 3_071_714_933, 3_626_093_760, 2_588_848_963]
        );
        let mut g = Mt19937::new(0);
        let got: [f64; 4] = core::array::from_fn(|_| g.uniform());
        let want = [0.5488135039273248, 0.7151893663724195, 0.6027633760716439, 0.5448831829968969];
        assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits));
        let mut g = Mt19937::new(5489);
        let got: [f64; 4] = core::array::from_fn(|_| g.uniform());
        let want =
            [0.8147236863931789, 0.9057919370756192, 0.12698681629350606, 0.9133758561390194];
        assert_eq!(got.map(f64::to_bits), want.map(f64::to_bits));
        // Past the first twist: outputs 701..=703 for seed 0.
        let mut g = Mt19937::new(0);
        (0..700).for_each(|_| {
            g.next_u32();
        });
        let got: [u32; 3] = core::array::from_fn(|_| g.next_u32());
        assert_eq!(got, [2_772_703_073, 2_041_352_620, 151_880_507]);
        // A seed wider than 32 bits is the key [low, high]:
        // `RandomState(np.array([low, high], dtype=np.uint32))`.
        let mut g = Mt19937::new(DEFAULT_SEED);
        let got: [u32; 3] = core::array::from_fn(|_| g.next_u32());
        assert_eq!(got, [1_653_824_617, 2_834_361_445, 3_738_864_234]);
    }

    #[test]
    fn dropout_in_training_mode() {
        let x = [1.5f32, -2.0, 3.0, -0.5, 4.0, 8.0, -1.0, 0.25];
        // Ratio 0 keeps every value unchanged.
        let (mut y, mut m) = ([0.0f32; 8], [false; 8]);
        dropout_train(5, 0.0, &x, &mut y, &mut m).unwrap();
        assert_eq!((y, m), (x, [true; 8]));
        // Ratio 0.75: kept values are scaled by 4, dropped ones are signed
        // zeros, and the mask says which; the same seed gives the same mask.
        dropout_train(5, 0.75, &x, &mut y, &mut m).unwrap();
        // The mask of `onnx.reference` (`RandomState(5).uniform(0, 1, 8) >= 0.75`).
        assert_eq!(m, [false, true, false, true, false, false, true, false]);
        for i in 0..8 {
            let want = if m[i] { x[i] * 4.0 } else { 0.0 * x[i] };
            assert_eq!(y[i].to_bits(), want.to_bits(), "{i}");
        }
        let mut m2 = [0u8; 8];
        let mut y2 = [0.0f32; 8];
        dropout_train(5, 0.75, &x, &mut y2, &mut m2).unwrap();
        assert_eq!(m2.map(|b| b != 0), m);
        let mut big = [0.0f32; 4000];
        let mut kept = [false; 4000];
        dropout_train(9, 0.75, &[1.0; 4000], &mut big, &mut kept).unwrap();
        let n = kept.iter().filter(|&&k| k).count();
        assert!((850..1150).contains(&n), "{n}");
        assert_eq!(
            dropout_train::<f32, bool>(1, 1.0, &x, &mut y, &mut []),
            Err(Error::InvalidParams)
        );
        assert_eq!(
            dropout_train::<f32, bool>(1, 0.5, &x, &mut y[..7], &mut []),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn momentum_step() {
        let op =
            Optimizer::Momentum { alpha: 0.9, beta: 0.1, norm_coefficient: 0.0, nesterov: false };
        let (mut xn, mut vn) = ([0.0f64], [0.0f64]);
        optimizer_step(op, 0.5, 1, &[1.0], &[2.0], &[1.0], &[], &mut xn, &mut vn, &mut []).unwrap();
        assert!((vn[0] - 1.1).abs() < 1e-12 && (xn[0] - 0.45).abs() < 1e-12);
    }
}
