//! Static memory planning: where every value of the main graph lives.
//!
//! Values are grouped into storages: a view (Reshape, Flatten, ...) shares
//! its input's bytes, and a kernel that can run in place writes over an input
//! that dies at that step. A storage is then one of:
//! - a graph input (the caller's array, read only),
//! - a graph output (the caller's array: the producer writes straight into it),
//! - a weight (a range of the read-only weight blob), or
//! - a range of the arena, placed by lifetime: storages whose lifetimes
//!   overlap get disjoint ranges. Four placements run, greedy by size and
//!   greedy by size times lifetime (lowest fitting offset) and two best-fit sweeps over
//!   the steps (taking free ranges by their low or high end), and the
//!   smallest arena wins; above [`GREEDY_MAX_STORAGES`] storages only the
//!   sweeps run.
//!
//! The steps may first be reordered ([`schedule`]) when that gives a
//! smaller arena.
//!
//! Outputs that are inputs, weights or another output's storage are copied
//! into place after the last step. Every range starts at a multiple of
//! [`ALIGN`] bytes, which suits SIMD loads and every element type.

use crate::ir::{Graph, ValueId, ValueKind};
use crate::ops::Lowered;
use crate::passes::infer::Inferred;
use std::cmp::Reverse;

/// Alignment of every arena and weight range, in bytes.
pub const ALIGN: usize = onnx_codegen_runtime::arena::ARENA_ALIGN;

/// Where a value's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    /// Graph input `i` (the caller's array).
    Input(usize),
    /// Graph output `i` (the caller's array).
    Output(usize),
    /// `len` bytes of the weight blob from `offset`.
    Weight { offset: usize, len: usize },
    /// `len` bytes of the arena from `offset`.
    Arena { offset: usize, len: usize },
}

/// What a step does in generated code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Calls its kernel; `in_place` when output 0 overwrites the input the
    /// kernel names.
    Call { in_place: bool },
    /// Nothing: the output shares the input's storage.
    View,
}

/// The memory plan of a graph.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Per value: where it lives, for values that exist at run time.
    pub locs: Vec<Option<Loc>>,
    /// Per step of [`Inferred::steps`].
    pub actions: Vec<Action>,
    /// Copies after the last step: (value, graph output index).
    pub output_copies: Vec<(ValueId, usize)>,
    /// Per step: the arena range of its scratch buffer, if its kernel asks for one.
    pub scratch: Vec<Option<(usize, usize)>>,
    /// The arena's size in bytes.
    pub arena_bytes: usize,
    /// The peak, over steps, of the bytes of storages live at once (unaligned):
    /// no plan without in-place reuse can use less.
    pub arena_lower_bound_bytes: usize,
    /// The weight blob (little-endian values, each at an aligned offset).
    pub weights: Vec<u8>,
    /// Per arena storage, for reports: (first value, offset, bytes, first step, last step).
    pub buffers: Vec<Buffer>,
}

/// One arena range, for reports and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Buffer {
    /// The values stored there (views and in-place results share storage).
    pub values: Vec<String>,
    pub offset: usize,
    pub bytes: usize,
    /// The step that writes it first.
    pub first_step: usize,
    /// The step that reads it last.
    pub last_step: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fixed {
    Input(usize),
    Output(usize),
    Weight(ValueId),
}

struct Groups {
    parent: Vec<usize>,
    fixed: Vec<Option<Fixed>>,
}

impl Groups {
    fn find(&mut self, v: usize) -> usize {
        let mut root = v;
        while self.parent[root] != root {
            root = self.parent[root];
        }
        let mut cur = v;
        while self.parent[cur] != root {
            let next = self.parent[cur];
            self.parent[cur] = root;
            cur = next;
        }
        root
    }

    /// Joins `b`'s group into `a`'s; false (and no change) if both are fixed.
    fn union(&mut self, a: usize, b: usize) -> bool {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra == rb {
            return true;
        }
        match (self.fixed[ra], self.fixed[rb]) {
            (Some(_), Some(_)) => false,
            (fa, fb) => {
                self.parent[rb] = ra;
                self.fixed[ra] = fa.or(fb);
                true
            }
        }
    }
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Plans the graph's storage after trying a step order of smaller peak
/// ([`schedule`]): `inferred.steps` takes that order when its plan's arena
/// is smaller, and keeps its own otherwise (so scheduling never grows an
/// arena).
pub fn plan_scheduled(g: &Graph, inferred: &mut Inferred) -> Plan {
    let first = plan(g, inferred);
    let Some(order) = schedule(g, inferred) else { return first };
    permute(&mut inferred.steps, &order);
    let second = plan(g, inferred);
    if second.arena_bytes < first.arena_bytes {
        return second;
    }
    let mut back = vec![0; order.len()];
    for (i, &o) in order.iter().enumerate() {
        back[o] = i;
    }
    permute(&mut inferred.steps, &back);
    first
}

/// `v[i] = old v[order[i]]`.
fn permute<T>(v: &mut Vec<T>, order: &[usize]) {
    let mut old: Vec<Option<T>> = v.drain(..).map(Some).collect();
    v.extend(order.iter().filter_map(|&i| old.get_mut(i).and_then(Option::take)));
}

/// Steps larger than this are not rescheduled (the passes are quadratic at
/// worst).
const SCHEDULE_MAX_STEPS: usize = 4096;

/// A step order of lower peak memory, if one is found: adjacent steps
/// that do not depend on each other swap when that lowers the larger of
/// the two steps' live bytes (storages live across the step, plus its
/// scratch), so the peak never rises. This runs a convolution with a
/// large scratch before an independent one whose output would otherwise
/// stay live across it (a ResNet block's shortcut convolution, moved after
/// the block's first convolution). Views, nodes with subgraphs and random
/// operators keep their places.
pub fn schedule(g: &Graph, inferred: &Inferred) -> Option<Vec<usize>> {
    let steps = &inferred.steps;
    let n = steps.len();
    if !(2..=SCHEDULE_MAX_STEPS).contains(&n) {
        return None;
    }
    let values = g.values().len();
    let size = |v: usize| inferred.types[v].as_ref().and_then(|t| t.byte_size()).unwrap_or(0);
    // Storages as the planner groups them: views share their input's.
    let mut groups = Groups { parent: (0..values).collect(), fixed: vec![None; values] };
    for step in steps {
        let node = g.node(step.node);
        if let (Lowered::Alias, Some(Some(i)), Some(Some(o))) =
            (&step.lowered, node.inputs.first(), node.outputs.first())
        {
            groups.union(i.index(), o.index());
        }
    }
    let pinned: Vec<bool> = {
        let mut p = vec![false; values];
        for v in g.inputs.iter().chain(&g.captures).chain(&g.outputs) {
            p[groups.find(v.index())] = true;
        }
        p
    };
    // Per step: the storages it reads and writes (arena ones only).
    let mut reads: Vec<Vec<usize>> = Vec::with_capacity(n);
    let mut writes: Vec<Vec<usize>> = Vec::with_capacity(n);
    let mut scratch = Vec::with_capacity(n);
    let mut movable = Vec::with_capacity(n);
    let mut gsize = vec![0usize; values];
    for step in steps {
        let node = g.node(step.node);
        let mut r = Vec::new();
        for (i, v) in node.reads().iter().enumerate() {
            let Some(v) = v else { continue };
            if let Lowered::Kernel(k) = &step.lowered
                && !k.reads_input(i)
            {
                continue;
            }
            r.push(groups.find(v.index()));
        }
        let w: Vec<usize> = node.outputs.iter().flatten().map(|v| groups.find(v.index())).collect();
        for v in node.outputs.iter().flatten() {
            let root = groups.find(v.index());
            gsize[root] = gsize[root].max(size(v.index()));
        }
        r.sort_unstable();
        r.dedup();
        scratch.push(match &step.lowered {
            Lowered::Kernel(k) => k.scratch().and_then(|t| t.byte_size()).unwrap_or(0),
            Lowered::Alias => 0,
        });
        let random = ["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"]
            .iter()
            .chain(&["Multinomial", "Bernoulli", "Dropout"])
            .any(|op| node.op.is(op));
        movable.push(
            matches!(step.lowered, Lowered::Kernel(_))
                && !random
                && node.subgraphs().next().is_none(),
        );
        reads.push(r);
        writes.push(w);
    }
    for (root, pinned) in pinned.iter().enumerate() {
        if *pinned {
            gsize[root] = 0;
        }
    }
    // `pos[s]`: where step `s` runs; the storages' first and last steps.
    let mut order: Vec<usize> = (0..n).collect();
    let first_last = |order: &[usize]| {
        let (mut first, mut last) = (vec![usize::MAX; values], vec![0usize; values]);
        for (t, &s) in order.iter().enumerate() {
            for &w in &writes[s] {
                first[w] = first[w].min(t);
            }
            for &r in &reads[s] {
                last[r] = last[r].max(t);
            }
        }
        (first, last)
    };
    let live_at =
        |order: &[usize], first: &[usize], last: &[usize], t: usize, touched: &[usize]| {
            // Only the touched storages' bytes (the rest is the same either way).
            let mut bytes = scratch[order[t]];
            for &g in touched {
                if first[g] <= t && t <= last[g].max(first[g]) {
                    bytes += gsize[g];
                }
            }
            bytes
        };
    // After `a` and `b` trade places `t` and `t + 1` (`b` now first): the
    // touched storages' first and last steps.
    let moved = |first: &mut [usize],
                 last: &mut [usize],
                 t: usize,
                 a: usize,
                 b: usize,
                 touched: &[usize]| {
        for &g in touched {
            if writes[a].contains(&g) {
                first[g] = t + 1;
            }
            if writes[b].contains(&g) {
                first[g] = t;
            }
            if last[g] == t || last[g] == t + 1 {
                last[g] = if reads[a].contains(&g) { t + 1 } else { t };
            }
        }
    };
    let mut changed = false;
    let (mut first, mut last) = first_last(&order);
    for _ in 0..8 {
        let mut swapped = false;
        for t in 0..n - 1 {
            let (a, b) = (order[t], order[t + 1]);
            if !movable[a] || !movable[b] {
                continue;
            }
            let depends = |x: usize, y: usize| reads[y].iter().any(|r| writes[x].contains(r));
            if depends(a, b) || depends(b, a) {
                continue;
            }
            let mut touched: Vec<usize> = reads[a]
                .iter()
                .chain(&reads[b])
                .chain(&writes[a])
                .chain(&writes[b])
                .copied()
                .filter(|&g| gsize[g] > 0)
                .collect();
            touched.sort_unstable();
            touched.dedup();
            let before = live_at(&order, &first, &last, t, &touched).max(live_at(
                &order,
                &first,
                &last,
                t + 1,
                &touched,
            ));
            let (saved_first, saved_last): (Vec<_>, Vec<_>) =
                touched.iter().map(|&g| (first[g], last[g])).unzip();
            order.swap(t, t + 1);
            moved(&mut first, &mut last, t, a, b, &touched);
            let after = live_at(&order, &first, &last, t, &touched).max(live_at(
                &order,
                &first,
                &last,
                t + 1,
                &touched,
            ));
            if after < before {
                swapped = true;
                changed = true;
            } else {
                order.swap(t, t + 1);
                for (i, &g) in touched.iter().enumerate() {
                    (first[g], last[g]) = (saved_first[i], saved_last[i]);
                }
            }
        }
        if !swapped {
            break;
        }
    }
    changed.then_some(order)
}

/// Plans the storage of every value that exists at run time.
pub fn plan(g: &Graph, inferred: &Inferred) -> Plan {
    let n = g.values().len();
    let mut groups = Groups { parent: (0..n).collect(), fixed: vec![None; n] };
    // A value too large to address takes "everything": the arena limit then
    // refuses the model rather than planning it into zero bytes.
    let size = |v: usize| {
        inferred.types[v].as_ref().map_or(0, |t| {
            t.byte_size().unwrap_or(if t.elem.bits().is_some() || t.numel().is_none() {
                usize::MAX
            } else {
                0
            })
        })
    };

    // Which values the steps and outputs read, and when.
    let mut last_use = vec![None::<usize>; n];
    let mut used_by_steps = vec![false; n];
    for (t, step) in inferred.steps.iter().enumerate() {
        for (i, v) in g.node(step.node).reads().iter().enumerate() {
            let Some(v) = v else { continue };
            if let Lowered::Kernel(k) = &step.lowered
                && !k.reads_input(i)
            {
                continue;
            }
            last_use[v.index()] = Some(t);
            used_by_steps[v.index()] = true;
        }
    }
    let end = inferred.steps.len();
    for &v in &g.outputs {
        last_use[v.index()] = Some(end);
    }

    // Inputs and weights are fixed where they are. A subgraph's captures
    // are inputs too, numbered after its own.
    for (i, &v) in g.inputs.iter().chain(&g.captures).enumerate() {
        groups.fixed[v.index()] = Some(Fixed::Input(i));
    }
    for v in 0..n {
        let is_input = matches!(g.values()[v].kind, ValueKind::Input { .. });
        if inferred.constants[v].is_some() && !is_input {
            groups.fixed[v] = Some(Fixed::Weight(ValueId(v as u32)));
        }
    }

    // Views share their input's storage.
    let mut actions = Vec::with_capacity(inferred.steps.len());
    for step in &inferred.steps {
        let node = g.node(step.node);
        actions.push(match &step.lowered {
            Lowered::Alias => {
                if let (Some(Some(i)), Some(Some(o))) = (node.inputs.first(), node.outputs.first())
                {
                    groups.union(i.index(), o.index());
                }
                Action::View
            }
            Lowered::Kernel(_) => Action::Call { in_place: false },
        });
    }

    // Graph outputs are the caller's arrays; an output whose storage is
    // already fixed elsewhere is copied at the end.
    let mut output_copies = Vec::new();
    for (j, &v) in g.outputs.iter().enumerate() {
        let r = groups.find(v.index());
        if groups.fixed[r].is_some() {
            output_copies.push((v, j));
        } else {
            groups.fixed[r] = Some(Fixed::Output(j));
        }
    }

    // Group lifetimes, for in-place decisions and placement.
    let mut group_last = vec![None::<usize>; n];
    for (v, &last) in last_use.iter().enumerate() {
        let r = groups.find(v);
        group_last[r] = group_last[r].max(last);
    }

    // In place: output 0 takes over an input whose storage dies here.
    for (t, step) in inferred.steps.iter().enumerate() {
        let Lowered::Kernel(kernel) = &step.lowered else { continue };
        let Some(k) = kernel.in_place() else { continue };
        let node = g.node(step.node);
        // `k` counts the node's reads: its inputs, then what its lowering
        // names (a fused residual).
        let reads = node.reads();
        let (Some(Some(input)), Some(Some(output))) = (reads.get(k), node.outputs.first()) else {
            continue;
        };
        let (ri, ro) = (groups.find(input.index()), groups.find(output.index()));
        let read_twice =
            reads.iter().flatten().filter(|v| groups.find(v.index()) == ri).count() > 1;
        if groups.fixed[ri].is_none()
            && groups.fixed[ro].is_none()
            && group_last[ri] == Some(t)
            && !read_twice
            && size(input.index()) == size(output.index())
        {
            groups.union(input.index(), output.index());
            let r = groups.find(input.index());
            group_last[r] = group_last[ri].max(group_last[ro]);
            actions[t] = Action::Call { in_place: true };
        }
    }

    // Arena storages: groups not fixed, written by some step.
    let mut first_def = vec![None::<usize>; n];
    for (t, step) in inferred.steps.iter().enumerate() {
        for v in g.node(step.node).outputs.iter().flatten() {
            let r = groups.find(v.index());
            if first_def[r].is_none() {
                first_def[r] = Some(t);
            }
        }
    }
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); n];
    for v in 0..n {
        let r = groups.find(v);
        members[r].push(v);
    }
    struct Storage {
        /// The group's root value, or `None` for a step's scratch buffer.
        root: Option<usize>,
        bytes: usize,
        first: usize,
        last: usize,
    }
    let mut storages: Vec<Storage> = Vec::new();
    for r in 0..n {
        if groups.find(r) != r || groups.fixed[r].is_some() {
            continue;
        }
        let Some(first) = first_def[r] else { continue };
        let bytes = members[r].iter().map(|&v| size(v)).max().unwrap_or(0);
        let last = group_last[r].unwrap_or(first).max(first);
        storages.push(Storage { root: Some(r), bytes, first, last });
    }
    let mut scratch_storage = vec![None::<usize>; inferred.steps.len()];
    for (t, step) in inferred.steps.iter().enumerate() {
        let Lowered::Kernel(k) = &step.lowered else { continue };
        if let Some(bytes) = k.scratch().and_then(|ty| ty.byte_size()) {
            scratch_storage[t] = Some(storages.len());
            storages.push(Storage { root: None, bytes, first: t, last: t });
        }
    }

    let spans: Vec<Span> =
        storages.iter().map(|s| Span { bytes: s.bytes, first: s.first, last: s.last }).collect();
    // No placement is always the smallest: keep the best of the sweeps
    // (taking free ranges by their low or their high end) and, where it is
    // affordable, greedy by size; the earlier one on a tie.
    let mut best = place_sweep(&spans, false);
    let mut others = vec![place_sweep(&spans, true)];
    if spans.len() <= GREEDY_MAX_STORAGES {
        others.push(place_greedy(&spans, |s| (Reverse(s.bytes), s.first)));
        // By bytes times steps: the storages that fill most of the
        // arena's area over time take the low offsets first.
        others
            .push(place_greedy(&spans, |s| Reverse(s.bytes.saturating_mul(s.last - s.first + 1))));
    }
    for other in others {
        if other.1 < best.1 {
            best = other;
        }
    }
    let (offsets, arena_bytes) = best;

    // Bytes live at each step: +bytes where a storage starts, -bytes after
    // it ends, summed along the steps.
    let mut delta = vec![0i128; end + 2];
    for s in &storages {
        delta[s.first.min(end)] += s.bytes as i128;
        delta[s.last.min(end) + 1] -= s.bytes as i128;
    }
    let mut live = 0i128;
    let mut peak = 0i128;
    for d in delta {
        live += d;
        peak = peak.max(live);
    }
    let arena_lower_bound_bytes = usize::try_from(peak).unwrap_or(usize::MAX);

    // Weights: constants read at run time, each at an aligned offset.
    let mut weights = Vec::new();
    let mut weight_loc = vec![None::<(usize, usize)>; n];
    let copied: Vec<usize> = output_copies.iter().map(|(v, _)| v.index()).collect();
    for v in 0..n {
        let r = groups.find(v);
        let Some(Fixed::Weight(c)) = groups.fixed[r] else { continue };
        let read = members[r].iter().any(|&m| used_by_steps[m] || copied.contains(&m));
        if !read || weight_loc[r].is_some() {
            continue;
        }
        let Some(t) = &inferred.constants[c.index()] else { continue };
        let crate::ir::TensorData::Bytes(bytes) = &t.data else { continue };
        let offset = align(weights.len());
        weights.resize(offset, 0);
        weights.extend_from_slice(bytes);
        weight_loc[r] = Some((offset, bytes.len()));
    }

    let mut locs = vec![None; n];
    let mut buffers = Vec::new();
    for (i, s) in storages.iter().enumerate() {
        let values = match s.root {
            Some(r) => members[r].iter().map(|&v| g.values()[v].name.clone()).collect(),
            None => vec![format!("scratch of step {}", s.first)],
        };
        buffers.push(Buffer {
            values,
            offset: offsets[i],
            bytes: s.bytes,
            first_step: s.first,
            last_step: s.last,
        });
        for &m in s.root.map(|r| members[r].as_slice()).unwrap_or_default() {
            locs[m] = Some(Loc::Arena { offset: offsets[i], len: size(m) });
        }
    }
    let scratch =
        scratch_storage.iter().map(|s| s.map(|i| (offsets[i], storages[i].bytes))).collect();
    for (v, loc) in locs.iter_mut().enumerate() {
        let r = groups.find(v);
        *loc = match groups.fixed[r] {
            Some(Fixed::Input(i)) => Some(Loc::Input(i)),
            Some(Fixed::Output(j)) => Some(Loc::Output(j)),
            Some(Fixed::Weight(_)) => {
                weight_loc[r].map(|(offset, _)| Loc::Weight { offset, len: size(v) })
            }
            None => *loc,
        };
    }
    Plan {
        locs,
        actions,
        output_copies,
        scratch,
        arena_bytes,
        arena_lower_bound_bytes,
        weights,
        buffers,
    }
}

/// Above this many arena storages the planner places by a sweep over the
/// steps instead of greedy by size, whose cost grows with the square of the
/// storages alive at once. Real models stay far below it; the bound keeps a
/// hostile graph of 100 000 values alive at once within seconds.
pub const GREEDY_MAX_STORAGES: usize = 4096;

/// An arena storage as placement sees it: its size and the steps (inclusive)
/// from its first write to its last read.
#[derive(Clone, Copy, Debug)]
struct Span {
    bytes: usize,
    first: usize,
    last: usize,
}

impl Span {
    fn meets(&self, other: &Span) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Greedy: in the order of `key` (largest first, or largest in bytes times
/// steps: a storage live across many steps then takes the low offsets
/// before the one-step scratch buffers, which fit above it), each at the lowest offset
/// that overlaps no placed storage whose lifetime meets its own. Returns
/// the offsets and the arena's size.
fn place_greedy<K: Ord>(spans: &[Span], key: impl Fn(&Span) -> K) -> (Vec<usize>, usize) {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| key(&spans[i]));
    let mut placed: Vec<(usize, usize, usize)> = Vec::new(); // (span, offset, aligned end)
    let mut offsets = vec![0usize; spans.len()];
    let mut arena_bytes = 0;
    for &i in &order {
        let s = &spans[i];
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&(j, _, _)| spans[j].meets(s))
            .map(|&(_, off, end)| (off, end))
            .collect();
        busy.sort_unstable();
        let need = align(s.bytes);
        let mut offset: usize = 0;
        for (off, end) in busy {
            if offset.saturating_add(need) <= off {
                break;
            }
            offset = offset.max(end);
        }
        offsets[i] = offset;
        placed.push((i, offset, offset.saturating_add(need)));
        arena_bytes = arena_bytes.max(offset.saturating_add(need));
    }
    (offsets, arena_bytes)
}

/// Placement in step order with a best-fit free list: at each step the
/// storages that died before it are freed (merged with free neighbours), then
/// the ones it writes first take the smallest free range that fits (its low
/// end, or its high end with `high`), or the arena's end. O(n log n) in the
/// number of storages.
fn place_sweep(spans: &[Span], high: bool) -> (Vec<usize>, usize) {
    use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].first, i));
    let mut by_offset: BTreeMap<usize, usize> = BTreeMap::new(); // free: offset -> len
    let mut by_len: BTreeSet<(usize, usize)> = BTreeSet::new(); // free: (len, offset)
    let mut live: BinaryHeap<Reverse<(usize, usize)>> = BinaryHeap::new(); // (last, span)
    let mut offsets = vec![0usize; spans.len()];
    let (mut top, mut arena_bytes) = (0usize, 0usize);
    for &i in &order {
        let s = spans[i];
        while let Some(&Reverse((last, j))) = live.peek() {
            if last >= s.first {
                break;
            }
            live.pop();
            let (mut off, mut len) = (offsets[j], align(spans[j].bytes));
            if len == 0 {
                continue;
            }
            if let Some((&p, &plen)) = by_offset.range(..off).next_back()
                && p.saturating_add(plen) == off
            {
                by_offset.remove(&p);
                by_len.remove(&(plen, p));
                (off, len) = (p, plen + len);
            }
            if let Some(nlen) = by_offset.remove(&off.saturating_add(len)) {
                by_len.remove(&(nlen, off.saturating_add(len)));
                len += nlen;
            }
            if off.saturating_add(len) == top {
                top = off;
            } else {
                by_offset.insert(off, len);
                by_len.insert((len, off));
            }
        }
        let need = align(s.bytes);
        let offset = if need == 0 {
            0
        } else if let Some(&(len, off)) = by_len.range((need, 0)..).next() {
            by_len.remove(&(len, off));
            by_offset.remove(&off);
            if len > need && high {
                // The high end: the rest stays next to whatever precedes it.
                by_offset.insert(off, len - need);
                by_len.insert((len - need, off));
                off + (len - need)
            } else {
                if len > need {
                    by_offset.insert(off + need, len - need);
                    by_len.insert((len - need, off + need));
                }
                off
            }
        } else {
            let off = top;
            top = top.saturating_add(need);
            off
        };
        offsets[i] = offset;
        arena_bytes = arena_bytes.max(offset.saturating_add(need));
        live.push(Reverse((s.last, i)));
    }
    (offsets, arena_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::pipeline::{Config, infer};

    fn planned(src: &str) -> (crate::ir::Model, Inferred, Plan) {
        let proto = crate::text::parse_model(src, "t.onnxtxt").expect("parses");
        let model = crate::passes::prepare(&proto).expect("valid").model;
        let inferred = infer(&model.graph, &Config::default());
        assert!(inferred.is_complete(), "{:?} {:?}", inferred.errors, inferred.unsupported);
        let plan = plan(&model.graph, &inferred);
        (model, inferred, plan)
    }

    fn loc(model: &crate::ir::Model, plan: &Plan, name: &str) -> Option<Loc> {
        plan.locs[model.graph.value_by_name(name).expect("value").index()]
    }

    const HEAD: &str = "<ir_version: 8, opset_import: [\"\" : 17]>\n";

    /// A quantized ResNet stage: the shortcut convolution comes first as
    /// written, so its output stays live across the block's first
    /// convolution and that one's large im2col scratch. The schedule runs
    /// it after, every step still after the steps it reads from, and the
    /// arena shrinks.
    #[test]
    fn a_shortcut_convolution_moves_after_the_block_convolution() {
        let w = |n: usize| (0..n).map(|i| ((i * 37) % 200) as i64 - 100).map(|v| v.to_string());
        let w3: Vec<String> = w(32 * 16 * 9).collect();
        let w1: Vec<String> = w(32 * 16).collect();
        let w1b: Vec<String> = w(32 * 32).collect();
        let src = format!(
            "{HEAD}g (float[1, 16, 16, 16] u) => (int8[1, 32, 8, 8] y)
             <float s = {{0.05}}, int8 z = {{0}},
              int8[32, 16, 1, 1] w1 = {{{}}}, int8[32, 16, 3, 3] w3 = {{{}}},
              int8[32, 32, 1, 1] w1b = {{{}}}, float ws = {{0.01}}, int8 wz = {{0}}>
             {{
               xq = QuantizeLinear (u, s, z)
               x = DequantizeLinear (xq, s, z)
               sw = DequantizeLinear (w1, ws, wz)
               sc = Conv <strides: ints = [2, 2]> (x, sw)
               scq = QuantizeLinear (sc, s, z)
               aw = DequantizeLinear (w3, ws, wz)
               a = Conv <strides: ints = [2, 2], pads: ints = [1, 1, 1, 1]> (x, aw)
               aq = QuantizeLinear (a, s, z)
               ad = DequantizeLinear (aq, s, z)
               bw = DequantizeLinear (w1b, ws, wz)
               b = Conv (ad, bw)
               bq = QuantizeLinear (b, s, z)
               bd = DequantizeLinear (bq, s, z)
               scd = DequantizeLinear (scq, s, z)
               sum = Add (bd, scd)
               y = QuantizeLinear (sum, s, z)
             }}",
            w1.join(", "),
            w3.join(", "),
            w1b.join(", ")
        );
        let proto = crate::text::parse_model(&src, "t.onnxtxt").expect("parses");
        let mut model = crate::passes::prepare(&proto).expect("valid").model;
        let g = &mut model.graph;
        let mut inferred = crate::passes::pipeline::run(g, &Config::default(), &[]).inferred;
        assert!(inferred.is_complete(), "{:?} {:?}", inferred.errors, inferred.unsupported);
        let names = |i: &Inferred| -> Vec<String> {
            i.steps.iter().map(|s| g.node(s.node).label(s.node)).collect()
        };
        let written = names(&inferred);
        let before = plan(g, &inferred);
        let planned = plan_scheduled(g, &mut inferred);
        assert!(
            planned.arena_bytes < before.arena_bytes,
            "{} {} {written:?}",
            planned.arena_bytes,
            before.arena_bytes
        );
        let order = names(&inferred);
        assert_ne!(order, written);
        // Every value is written before it is read.
        let mut ready = vec![false; g.values().len()];
        for s in &inferred.steps {
            let node = g.node(s.node);
            for v in node.reads().iter().flatten() {
                let needed = matches!(g.value(*v).kind, ValueKind::NodeOutput { .. })
                    && inferred.constants[v.index()].is_none();
                assert!(!needed || ready[v.index()], "{order:?}");
            }
            for v in node.outputs.iter().flatten() {
                ready[v.index()] = true;
            }
        }
    }

    /// Random lifetimes and sizes: both placements keep storages whose
    /// lifetimes meet apart, and neither goes below the live peak.
    #[test]
    fn both_placements_keep_meeting_storages_apart() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % m as u64) as usize
        };
        for round in 0..20 {
            let n = 50 + round * 40;
            let spans: Vec<Span> = (0..n)
                .map(|_| {
                    let first = next(200);
                    Span { bytes: next(5) * 100 + next(64), first, last: first + next(30) }
                })
                .collect();
            let mut peak = 0;
            for t in 0..240 {
                let live: usize =
                    spans.iter().filter(|s| s.first <= t && t <= s.last).map(|s| s.bytes).sum();
                peak = peak.max(live);
            }
            for (offsets, arena) in [
                place_greedy(&spans, |s| (Reverse(s.bytes), s.first)),
                place_greedy(&spans, |s| Reverse(s.bytes * (s.last - s.first + 1))),
                place_sweep(&spans, false),
                place_sweep(&spans, true),
            ] {
                assert!(arena >= peak);
                for i in 0..n {
                    assert!(offsets[i] + align(spans[i].bytes) <= arena);
                    for j in 0..i {
                        let (a, b) = (&spans[i], &spans[j]);
                        if a.meets(b) && a.bytes > 0 && b.bytes > 0 {
                            let disjoint = offsets[i] + align(a.bytes) <= offsets[j]
                                || offsets[j] + align(b.bytes) <= offsets[i];
                            assert!(disjoint, "round {round}: storages {i} and {j} overlap");
                        }
                    }
                }
            }
        }
    }

    /// A graph with more values alive at once than the greedy bound is
    /// planned by the sweep: every pair of them stays apart.
    #[test]
    fn a_wide_graph_is_planned_by_the_sweep() {
        let n = GREEDY_MAX_STORAGES + 100;
        let mut src = String::from(
            "<ir_version: 8, opset_import: [\"\" : 17]>\nwide (float[4] x) => (float[4] y) {\n",
        );
        for i in 0..n {
            src.push_str(&format!("  v{i} = Neg (x)\n"));
        }
        let mut acc = "v0".to_owned();
        for i in 1..n {
            src.push_str(&format!("  s{i} = Add ({acc}, v{i})\n"));
            acc = format!("s{i}");
        }
        src.push_str(&format!("  y = Identity ({acc})\n}}\n"));
        let (model, _, plan) = planned(&src);
        assert!(plan.buffers.len() > GREEDY_MAX_STORAGES);
        let mut offsets: Vec<usize> = (0..n)
            .filter_map(|i| match loc(&model, &plan, &format!("v{i}")) {
                Some(Loc::Arena { offset, .. }) => Some(offset),
                _ => None,
            })
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        // v1..v(n-1) are alive together while the sum runs (v0 may be reused).
        assert!(offsets.len() >= n - 1);
        assert!(plan.arena_bytes >= plan.arena_lower_bound_bytes);
    }

    #[test]
    fn a_chain_of_unary_ops_runs_in_place_in_one_buffer() {
        let (m, _, p) = planned(&format!(
            "{HEAD}g (float[16] x) => (float[16] y) {{ a = Neg (x) b = Relu (a) c = Exp (b) y = Neg (c) }}"
        ));
        // `a` is written from the input; b and c overwrite it; y is the caller's array.
        assert_eq!(p.actions[0], Action::Call { in_place: false });
        assert_eq!(p.actions[1], Action::Call { in_place: true });
        assert_eq!(p.actions[2], Action::Call { in_place: true });
        assert_eq!(loc(&m, &p, "a"), Some(Loc::Arena { offset: 0, len: 64 }));
        assert_eq!(loc(&m, &p, "c"), Some(Loc::Arena { offset: 0, len: 64 }));
        assert_eq!(loc(&m, &p, "y"), Some(Loc::Output(0)));
        assert_eq!((p.arena_bytes, p.arena_lower_bound_bytes), (64, 64));
    }

    /// int8 depthwise and pointwise convolutions of equal shapes write over
    /// their input (`int8::qconv_runs_in_place`); a 3x3 product does not,
    /// nor does one reading the caller's input.
    #[test]
    fn int8_depthwise_and_pointwise_convolutions_run_in_place() {
        let w = |n: usize| {
            let v: Vec<String> = (0..n).map(|i| ((i * 7 % 11) as i32 - 5).to_string()).collect();
            v.join(", ")
        };
        // Through the whole pipeline: the in-place path wants packed weights
        // (a weight two products read stays unpacked: each has its own).
        let lowered = |src: &str| {
            let proto = crate::text::parse_model(src, "t.onnxtxt").expect("parses");
            let mut model = crate::passes::prepare(&proto).expect("valid").model;
            let l = crate::passes::pipeline::run(&mut model.graph, &Config::default(), &[]);
            assert!(l.inferred.is_complete(), "{:?}", l.inferred.unsupported);
            let plan = plan(&model.graph, &l.inferred);
            (model, plan)
        };
        let (m, p) = lowered(&format!(
            "{HEAD}g (uint8[1, 8, 5, 5] x) => (uint8[1, 8, 5, 5] y)
            <int8[8, 8, 1, 1] wp = {{{}}}, int8[8, 1, 3, 3] wd = {{{}}},
             int8[8, 8, 1, 1] wq = {{{}}}, int8[8, 8, 3, 3] w3 = {{{}}},
             float ws = {{0.01}}, int8 wz = {{0}},
             float s = {{0.05}}, uint8 z = {{128}}> {{
                a = QLinearConv (x, s, z, wp, ws, wz, s, z)
                b = QLinearConv <group: int = 8, pads: ints = [1, 1, 1, 1]> (a, s, z, wd, ws, wz, s, z)
                c = QLinearConv (b, s, z, wq, ws, wz, s, z)
                y = QLinearConv <pads: ints = [1, 1, 1, 1]> (c, s, z, w3, ws, wz, s, z)
            }}",
            w(64),
            w(72),
            w(64),
            w(576),
        ));
        // `a` from the caller's `x`; `b` and `c` over it; `y` a 3x3 product.
        let calls: Vec<Action> = p.actions.iter().copied().filter(|a| *a != Action::View).collect();
        assert_eq!(
            calls,
            [
                Action::Call { in_place: false },
                Action::Call { in_place: true },
                Action::Call { in_place: true },
                Action::Call { in_place: false },
            ]
        );
        let at = |n: &str| match loc(&m, &p, n) {
            Some(Loc::Arena { offset, .. }) => offset,
            other => panic!("{n}: {other:?}"),
        };
        assert_eq!((at("a"), at("b")), (at("c"), at("c")));
    }

    #[test]
    fn values_alive_together_get_disjoint_ranges_and_dead_ones_are_reused() {
        let (m, _, p) = planned(&format!(
            "{HEAD}g (float[32] x) => (float[32] y) {{
                a = Neg (x)
                b = Exp (x)
                c = Add (a, b)
                d = Sigmoid (x)
                y = Mul (c, d)
            }}"
        ));
        let range = |n: &str| match loc(&m, &p, n) {
            Some(Loc::Arena { offset, len }) => offset..offset + len,
            other => panic!("{n}: {other:?}"),
        };
        let (a, b, c, d) = (range("a"), range("b"), range("c"), range("d"));
        assert!(a.end <= b.start || b.end <= a.start, "a and b overlap");
        assert!(c.end <= d.start || d.end <= c.start, "c and d overlap");
        // a and b are dead once c exists: three 128-byte values live at most.
        assert_eq!(p.arena_lower_bound_bytes, 3 * 128);
        assert_eq!(p.arena_bytes, 3 * 128);
    }

    #[test]
    fn views_share_storage_and_outputs_are_written_in_place() {
        let (m, _, p) = planned(
            &format!(
                "{HEAD}g (float[2, 8] x) => (float[16] y) {{ a = Relu (x) y = Reshape (a, s) }}"
            )
            .replace("{ a", "<int64[1] s = {16}> { a"),
        );
        // Relu writes straight into the caller's output through the view.
        assert_eq!(loc(&m, &p, "a"), Some(Loc::Output(0)));
        assert_eq!(loc(&m, &p, "y"), Some(Loc::Output(0)));
        assert_eq!(p.actions[1], Action::View);
        assert_eq!(p.arena_bytes, 0);
    }

    #[test]
    fn outputs_that_are_inputs_or_repeated_are_copied() {
        let (m, _, p) = planned(&format!(
            "{HEAD}g (float[4] x) => (float[4] y, float[4] z, float[4] w) {{ y = Identity (x) z = Neg (x) w = Identity (z) }}"
        ));
        assert_eq!(loc(&m, &p, "z"), Some(Loc::Output(1)));
        let copied: Vec<usize> = p.output_copies.iter().map(|&(_, j)| j).collect();
        assert_eq!(copied, [0, 2]);
    }
}
