//! The strided iteration engine every pointwise and reduction kernel runs on.
//!
//! A [`TensorIter`] is what PyTorch's `TensorIterator` has decided for one
//! call: the iteration shape (dimension 0 fastest, already coalesced), and per
//! operand a data pointer, a dtype and byte strides (0 = broadcast). Outputs
//! come first. Operands may have different dtypes (CPU scalars, `out=` of
//! another dtype, mixed-dtype inputs): the engine converts each block of
//! elements into the kernel's compute type on load and back on store, so an
//! op is written once per compute type and never assumes a layout.
//!
//! Work is split into contiguous ranges of the linear iteration index and run
//! as tasks when there are more than [`GRAIN`] elements per thread.
//! Within a range, rows along dimension 0 are processed in blocks of
//! [`BLOCK`] elements: a contiguous operand of the compute type is used in
//! place, anything else is staged through a small buffer; broadcast (stride-0)
//! inputs are staged once per task. [`map`] is the driver the pointwise
//! families run on.
//!
//! Tasks ([`for_each_task`], [`map_tasks`]) run on the kernel thread team
//! ([`crate::engine::team`]): task t on the same thread every call (unless its
//! worker is late, see `team`), so a thread re-reads the part of a tensor it
//! already has in cache, as OpenMP's static schedule does; more tasks than
//! threads are claimed one by one by the team's threads, OpenMP's dynamic
//! schedule. [`for_each_chunk_mut`], [`try_for_each_task`] and [`map_in_runs`]
//! serve kernels that split a slice or collect per-part results.
//!
//! Kernels outside the engine split the same way: [`tasks_for`] (or
//! [`thread_tasks`]) decides how many tasks a problem deserves, and
//! [`for_each_range`] / [`try_for_each_range`] run contiguous ranges of its
//! units (rows, lines, planes) on them. The boundaries depend only on the unit
//! count and the task count, so a kernel's split, and with it the order in
//! which it accumulates, is the same on every call.

use rayon::prelude::*;
use smallvec::SmallVec;

use crate::dtype::{DType, Element};
use crate::engine::{convert, SendPtr};
use crate::error::{Error, Result};
use crate::with_dtype;

/// Elements per staged block (a few KiB per operand: stays in L1).
pub const BLOCK: usize = 1024;
/// Minimum elements per parallel task; PyTorch's `at::internal::GRAIN_SIZE`.
pub const GRAIN: usize = 32768;
/// Most operands a kernel takes (outputs and inputs together).
pub const MAX_OPERANDS: usize = 8;

/// Dimensions kept inline in a [`TensorIter`]; more spill to the heap.
pub const INLINE_DIMS: usize = 6;
/// Operands kept inline in a [`TensorIter`] (binary ops with an output are three).
pub const INLINE_OPERANDS: usize = 4;
/// The extents of an iteration space, dimension 0 fastest.
pub type Shape = SmallVec<[usize; INLINE_DIMS]>;
/// One operand's byte strides, one per dimension.
pub type Strides = SmallVec<[isize; INLINE_DIMS]>;

/// One operand: base pointer (at the first element), dtype, byte strides.
#[derive(Debug, Clone, Copy)]
pub struct Operand {
    pub ptr: *mut u8,
    pub dtype: DType,
}

/// `s` as [`Strides`]: a copy of the slice where `isize` is `i64`.
#[inline]
fn strides_from_i64(s: &[i64]) -> Strides {
    #[cfg(target_pointer_width = "64")]
    {
        // SAFETY: isize and i64 have the same size, alignment and representation on
        // 64-bit targets, so the slice reads as isize.
        Strides::from_slice(unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<isize>(), s.len()) })
    }
    #[cfg(not(target_pointer_width = "64"))]
    {
        s.iter().map(|&x| x as isize).collect()
    }
}

/// An iteration space over strided operands, as the glue describes a `TensorIterator`.
///
/// Its arrays are inline up to [`INLINE_DIMS`] dimensions and [`INLINE_OPERANDS`]
/// operands. Why: one is built on the launching thread for every launch and
/// dropped on the stream's worker; heap arrays freed on another thread than the
/// one that allocated them empty the launching thread's malloc cache, so every
/// launch paid malloc's slow path several times (seen with `perf`: `_int_malloc`
/// was the hottest symbol of a loop of 1-element adds).
#[derive(Debug, Clone)]
pub struct TensorIter {
    /// Extents, dimension 0 fastest.
    pub shape: Shape,
    /// Operands, outputs first.
    pub operands: SmallVec<[Operand; INLINE_OPERANDS]>,
    /// `strides[k][d]`: byte stride of operand k along dimension d.
    pub strides: SmallVec<[Strides; INLINE_OPERANDS]>,
    /// Number of outputs at the front of `operands`.
    pub noutputs: usize,
    /// Threads the caller allows (PyTorch's `at::get_num_threads()`); 1 = serial.
    pub threads: usize,
    /// When set, input values of another dtype are rounded to this dtype
    /// after loading, and results stored into an output of another dtype are
    /// rounded to it first (half-precision type promotion, see `pointwise`).
    pub round_through: Option<DType>,
}

// SAFETY: an Operand is a plain address into device memory plus a dtype; the
// glue guarantees it stays valid for the call and that outputs do not partially
// overlap inputs (TensorIterator's overlap checks), and tasks write disjoint
// ranges of the iteration space, so it may move to another thread.
unsafe impl Send for Operand {}
// SAFETY: as for `Send`: shared references only read the address and dtype.
unsafe impl Sync for Operand {}
// SAFETY: a TensorIter is owned shape/stride vectors plus Operands, which are
// Send (above); the glue's guarantees cover every operand.
unsafe impl Send for TensorIter {}
// SAFETY: as for `Send`; `&TensorIter` only reads the description.
unsafe impl Sync for TensorIter {}

impl TensorIter {
    /// Builds and validates an iteration description.
    ///
    /// Errors: [`Error::InvalidLayout`] when a stride array's length differs
    /// from the number of dimensions, an extent is negative, or there are more
    /// than [`MAX_OPERANDS`] operands.
    pub fn new<'a>(
        op: &'static str,
        shape: &[i64],
        operands: impl IntoIterator<Item = (Operand, &'a [i64])>,
        noutputs: usize,
        threads: usize,
    ) -> Result<TensorIter> {
        // Built in place, without iterator adapters: this runs at every launch, and
        // collecting through `Result` adapters cost about 240 more instructions
        // (callgrind: 636 to 394 per launch).
        let mut it = TensorIter {
            shape: Shape::new(),
            operands: SmallVec::new(),
            strides: SmallVec::new(),
            noutputs,
            threads: threads.max(1),
            round_through: None,
        };
        for &d in shape {
            let Ok(d) = usize::try_from(d) else {
                return Err(Error::InvalidLayout { op, reason: format!("negative extent {d}") });
            };
            it.shape.push(d);
        }
        let mut n = 0;
        for (o, s) in operands {
            if s.len() != shape.len() {
                return Err(Error::InvalidLayout {
                    op,
                    reason: format!("{} strides for {} dimensions", s.len(), shape.len()),
                });
            }
            n += 1;
            if n > MAX_OPERANDS {
                continue; // refused below, with the count
            }
            it.operands.push(o);
            it.strides.push(strides_from_i64(s));
        }
        if n > MAX_OPERANDS || noutputs > n {
            return Err(Error::InvalidLayout { op, reason: format!("{n} operands, {noutputs} outputs") });
        }
        Ok(it)
    }

    /// Number of elements in the iteration space.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of operands.
    pub fn ntensors(&self) -> usize {
        self.operands.len()
    }

    /// Dtype of operand `k`.
    pub fn dtype(&self, k: usize) -> DType {
        self.operands[k].dtype
    }

    /// Byte stride of operand `k` along dimension 0 (0 for a 0-dim space).
    pub fn inner_stride(&self, k: usize) -> isize {
        self.strides[k].first().copied().unwrap_or(0)
    }

    /// How many parallel tasks `numel` elements of work deserve ([`tasks_for`] with this call's threads).
    pub fn tasks_for(&self, numel: usize) -> usize {
        tasks_for(numel, 1, self.threads)
    }

    /// Calls `f(offsets, len)` for every row segment of the linear index range
    /// `[start, end)`: `offsets[k]` is operand k's byte offset of the segment's
    /// first element; a segment runs along dimension 0 for `len` elements.
    pub fn for_each_row_in(&self, start: usize, end: usize, mut f: impl FnMut(&[isize; MAX_OPERANDS], usize)) {
        if start >= end {
            return;
        }
        let nd = self.shape.len();
        let n = self.ntensors();
        if nd == 0 {
            f(&[0; MAX_OPERANDS], 1);
            return;
        }
        // Multi-index of `start`, dimension 0 fastest.
        let mut index = [0usize; 16];
        let mut big_index = vec![0usize; if nd > 16 { nd } else { 0 }];
        let idx: &mut [usize] = if nd > 16 { &mut big_index } else { &mut index[..nd] };
        let mut rem = start;
        for (i, &extent) in idx.iter_mut().zip(&self.shape) {
            *i = rem % extent;
            rem /= extent;
        }
        // Operand k's offset moves with its strides `strides[k]`.
        let strides = &self.strides[..n];
        let mut offsets = [0isize; MAX_OPERANDS];
        for (o, s) in offsets[..n].iter_mut().zip(strides) {
            *o = (0..nd).map(|d| idx[d] as isize * s[d]).sum();
        }
        let mut pos = start;
        let inner = self.shape[0];
        while pos < end {
            let len = (inner - idx[0]).min(end - pos);
            f(&offsets, len);
            pos += len;
            if pos >= end {
                break;
            }
            // Advance to the start of the next row.
            for (o, s) in offsets[..n].iter_mut().zip(strides) {
                *o += len as isize * s[0];
            }
            idx[0] += len;
            let mut d = 0;
            while idx[d] == self.shape[d] {
                for (o, s) in offsets[..n].iter_mut().zip(strides) {
                    *o -= self.shape[d] as isize * s[d];
                }
                idx[d] = 0;
                d += 1;
                if d == nd {
                    return;
                }
                idx[d] += 1;
                for (o, s) in offsets[..n].iter_mut().zip(strides) {
                    *o += s[d];
                }
            }
        }
    }

    /// Byte offsets of element `j` of the row that starts at `row` (from [`TensorIter::for_each_row_in`]).
    #[inline]
    pub fn offsets_at(&self, row: &[isize; MAX_OPERANDS], j: usize) -> [isize; MAX_OPERANDS] {
        std::array::from_fn(|k| if k < self.ntensors() { row[k] + j as isize * self.inner_stride(k) } else { 0 })
    }

    /// Runs `f(start, end)` over `[0, total)` split into contiguous ranges, in
    /// parallel when `total` elements of work justify more than one task.
    pub fn parallel_ranges(&self, total: usize, f: impl Fn(usize, usize) + Sync) {
        for_each_range(total, self.tasks_for(total), f);
    }
}

/// How many parallel tasks `units` units of `unit_work` elements each deserve
/// when `threads` threads are allowed: one per [`GRAIN`] elements of work, at
/// least 1, at most `threads` (1 when serial) and at most `units` (a unit, such
/// as a row, is never split). Pass `unit_work = 1` to split plain elements.
pub fn tasks_for(units: usize, unit_work: usize, threads: usize) -> usize {
    if threads <= 1 {
        1
    } else {
        (units.saturating_mul(unit_work) / GRAIN).clamp(1, threads).min(units.max(1))
    }
}

/// Like [`tasks_for`], but once the work reaches one [`GRAIN`] every allowed
/// thread gets a task (at most one per unit): for kernels whose tasks each
/// allocate per-range buffers, where fewer, larger ranges do not pay off.
pub fn thread_tasks(units: usize, unit_work: usize, threads: usize) -> usize {
    if units.saturating_mul(unit_work) < GRAIN {
        1
    } else {
        threads.max(1).min(units)
    }
}

/// Runs `f(start, end)` over `[0, count)` cut into `tasks` contiguous ranges of
/// `count.div_ceil(tasks)` units (the last one shorter, trailing ones possibly
/// empty), one task each; with `tasks <= 1`, `f(0, count)` on the calling thread.
/// The boundaries depend only on `count` and `tasks`, so a kernel that fixes
/// both splits (and accumulates) the same way on every call.
pub fn for_each_range(count: usize, tasks: usize, f: impl Fn(usize, usize) + Sync) {
    if tasks <= 1 {
        return f(0, count);
    }
    let chunk = count.div_ceil(tasks);
    for_each_task(tasks, |t| f((t * chunk).min(count), ((t + 1) * chunk).min(count)));
}

/// [`for_each_range`] for fallible `f`: the error of the lowest-numbered failing range wins.
pub fn try_for_each_range<E: Send>(
    count: usize,
    tasks: usize,
    f: impl Fn(usize, usize) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    if tasks <= 1 {
        return f(0, count);
    }
    let chunk = count.div_ceil(tasks);
    try_for_each_task(tasks, |t| f((t * chunk).min(count), ((t + 1) * chunk).min(count)))
}

/// Runs `f(t)` for every task `t` in `0..tasks`, in parallel.
///
/// With at most one task per thread, from outside the pools, the tasks go to the
/// kernel thread team ([`crate::engine::team`]): task 0 on the calling thread, task `t`
/// on team worker `t`, the same worker on every call. A kernel that splits a
/// tensor the same way on every call then has each thread read the same part
/// every time, which stays in that core's caches between calls (with work
/// stealing the parts went to threads at random, and a 40 MB reduction ran at
/// DRAM speed where CPU PyTorch, with OpenMP's static schedule, reused its cached
/// half). With more tasks than threads, every team thread takes the next
/// unclaimed task until none is left (OpenMP's dynamic schedule), which evens
/// out tasks of unequal cost such as causal attention's row blocks. Inside a
/// team task (a nested split) the tasks run serially on the calling thread,
/// since every team thread already has a task. From a rayon thread they are
/// work-stolen on rayon's pool.
pub fn for_each_task(tasks: usize, f: impl Fn(usize) + Sync) {
    match tasks {
        0 => {}
        1 => f(0),
        _ if crate::engine::team::in_team() => (0..tasks).for_each(&f),
        _ if rayon::current_thread_index().is_some() => (0..tasks).into_par_iter().for_each(&f),
        _ if tasks <= crate::engine::team::size() && crate::engine::team::run(tasks, &f) => {}
        _ => {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let claim = |_: usize| loop {
                let t = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if t >= tasks {
                    break;
                }
                f(t);
            };
            if !crate::engine::team::run(crate::engine::team::size(), &claim) {
                claim(0);
            }
        }
    }
}

/// [`for_each_task`] collecting each task's result, in task order.
pub fn map_tasks<T: Send>(tasks: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let slots: Vec<std::sync::Mutex<Option<T>>> = (0..tasks).map(|_| std::sync::Mutex::new(None)).collect();
    for_each_task(tasks, |t| {
        let v = f(t);
        *slots[t].lock().unwrap_or_else(|e| e.into_inner()) = Some(v);
    });
    slots.into_iter().map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every task ran")).collect()
}

/// [`for_each_task`] for fallible tasks: every task runs to its end or its first
/// error, and the error of the lowest-numbered failing task is returned.
pub fn try_for_each_task<E: Send>(
    tasks: usize,
    f: impl Fn(usize) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    map_tasks(tasks, f).into_iter().collect()
}

/// `f(i)` for every `i` in `0..count`, results in order, with the indices dealt out
/// to at most `tasks` tasks in contiguous runs (so each thread takes one run, as
/// `at::parallel_for` does, rather than one task per index).
pub fn map_in_runs<R: Send>(count: usize, tasks: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let per = count.div_ceil(tasks.clamp(1, count.max(1))).max(1);
    map_tasks(count.div_ceil(per), |t| (t * per..((t + 1) * per).min(count)).map(&f).collect::<Vec<R>>())
        .into_iter()
        .flatten()
        .collect()
}

/// Calls `f(i, chunk)` for every `size`-element chunk `i` of `data` (the last may be
/// shorter), the chunks dealt out to at most `tasks` tasks in contiguous runs; a
/// task stops at its first error, and the error of the lowest-numbered failing task
/// is returned. `size == 0` calls nothing.
pub fn try_for_each_chunk_mut<T: Send, E: Send>(
    data: &mut [T],
    size: usize,
    tasks: usize,
    f: impl Fn(usize, &mut [T]) -> std::result::Result<(), E> + Sync,
) -> std::result::Result<(), E> {
    if size == 0 || data.is_empty() {
        return Ok(());
    }
    let (len, chunks) = (data.len(), data.len().div_ceil(size));
    let per = chunks.div_ceil(tasks.clamp(1, chunks));
    let base = SendPtr::new(data.as_mut_ptr());
    try_for_each_task(chunks.div_ceil(per), |t| {
        for i in t * per..((t + 1) * per).min(chunks) {
            let (start, end) = (i * size, ((i + 1) * size).min(len));
            // SAFETY: chunk i is [start, end) of `data`, disjoint from every other chunk,
            // and `data` is borrowed mutably until every task has finished.
            f(i, unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) })?;
        }
        Ok(())
    })
}

/// [`try_for_each_chunk_mut`] for infallible `f`.
pub fn for_each_chunk_mut<T: Send>(data: &mut [T], size: usize, tasks: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let _ = try_for_each_chunk_mut::<T, ()>(data, size, tasks, |i, c| {
        f(i, c);
        Ok(())
    });
}

/// Loads `n` elements of `dtype` at `src` (byte stride `stride`) into `dst`, converted to `T`.
///
/// # Safety
/// `src + i*stride` must be readable elements of `dtype` for `i < n`; `dst.len() >= n`.
#[inline]
pub unsafe fn load<T: Element>(dtype: DType, src: *const u8, stride: isize, n: usize, dst: &mut [T]) -> Result<()> {
    if dtype == T::DTYPE && stride == std::mem::size_of::<T>() as isize {
        // SAFETY: caller contract; same type, contiguous.
        unsafe { convert::copy_elements(src as *const T, dst.as_mut_ptr(), n) };
        return Ok(());
    }
    // float32 <-> float16/bfloat16 runs convert vectorised (engine::convert).
    if stride == dtype.size() as isize && n <= dst.len() {
        // SAFETY: caller contract: n contiguous readable elements at `src`; `dst`
        // holds at least n elements and is a distinct buffer.
        if unsafe { convert::contiguous(dtype, src, T::DTYPE, dst.as_mut_ptr() as *mut u8, n) } {
            return Ok(());
        }
    }
    with_dtype!(dtype, "load", |S| {
        for (i, d) in dst[..n].iter_mut().enumerate() {
            // SAFETY: caller contract.
            *d = unsafe { (src.offset(i as isize * stride) as *const S).read_unaligned() }.cast::<T>();
        }
    });
    Ok(())
}

/// Rounds every value of `v` to the nearest value of the half-precision `dtype` (others: unchanged).
fn round_to<T: Element>(dtype: DType, v: &mut [T]) {
    match dtype {
        DType::F16 => v.iter_mut().for_each(|x| *x = T::from_f64(half::f16::from_f32(x.to_f64() as f32).to_f64())),
        DType::BF16 => v.iter_mut().for_each(|x| *x = T::from_f64(half::bf16::from_f32(x.to_f64() as f32).to_f64())),
        _ => {}
    }
}

/// Stores `src` (of `T`) into `n` elements of `dtype` at `dst` (byte stride `stride`), converted.
///
/// # Safety
/// `dst + i*stride` must be writable elements of `dtype` for `i < n`.
#[inline]
pub unsafe fn store<T: Element>(dtype: DType, dst: *mut u8, stride: isize, src: &[T]) -> Result<()> {
    if stride == dtype.size() as isize {
        // SAFETY: caller contract: src.len() contiguous writable elements of `dtype`
        // at `dst`, which is not `src`'s memory (a staging buffer).
        if unsafe { convert::contiguous(T::DTYPE, src.as_ptr() as *const u8, dtype, dst, src.len()) } {
            return Ok(());
        }
    }
    with_dtype!(dtype, "store", |D| {
        for (i, s) in src.iter().enumerate() {
            // SAFETY: caller contract.
            unsafe { (dst.offset(i as isize * stride) as *mut D).write_unaligned(s.cast::<D>()) };
        }
    });
    Ok(())
}

/// The elementwise driver: for every element, `out = f([in_1, .., in_N])`,
/// with operand 0 the output and operands 1..=N the inputs, inputs converted
/// to `I` and the result converted from `O` to the output's dtype.
///
/// `f` gets raw block pointers (`out`, `ins`, `n`) so that in-place calls
/// (output aliasing an input element for element) are sound; write it as a
/// plain indexed loop and LLVM vectorises it.
///
/// Errors: [`Error::UnsupportedDtype`] for a complex input to a real compute
/// type `I`, or a complex32 output of anything but a complex32 `O` (a converting copy).
///
/// # Safety
/// Every element the iterator addresses must be valid device (or host scalar)
/// memory of the operand's dtype; the output must not partially overlap an input.
pub unsafe fn map<I: Element, O: Element, const N: usize>(
    it: &TensorIter,
    f: impl Fn(*mut O, [*const I; N], usize) + Sync,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { drive(it, |o, ins, n, _| f(o, ins, n), false) }
}

/// [`map`] for a block function that, with `chunks`, handles in-place calls itself:
/// where the output block is also one of the input blocks, `f` then gets `aliased`
/// true and that input unstaged, and must load each chunk of its inputs before it
/// stores the chunk's results ([`in_place_chunks`]). That saves [`map`]'s copy of
/// the aliased block. Without `chunks` this is [`map`] (`aliased` is always false).
///
/// # Safety
/// As [`map`].
pub unsafe fn map_in_place<I: Element, O: Element, const N: usize>(
    it: &TensorIter,
    chunks: bool,
    f: impl Fn(*mut O, [*const I; N], usize, bool) + Sync,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { drive(it, f, chunks) }
}

/// `out[i] = g([in_1[i], .., in_N[i]])` for `i < len`, where `out` may be one of
/// the inputs (exactly, element for element), vectorised all the same: each chunk
/// of [`IN_PLACE_CHUNK`] elements is loaded into registers before its results are
/// stored, so no store can reach a load still to come and LLVM needs no runtime
/// alias check (its check sends exact aliasing to the scalar loop).
///
/// Measured (`examples/alias_probe.rs`, one thread, float32 `a += alpha * b` in
/// place, two runs): 0.71-0.87x the time of [`map`] with its staged copy, from
/// 65,536 to 1e7 elements, about what a plain slice loop takes.
///
/// # Safety
/// `len` elements are readable at every input and writable at `out`; `out` equals
/// an input or overlaps none.
#[inline(always)]
pub unsafe fn in_place_chunks<I: Copy, O, const N: usize>(
    out: *mut O,
    ins: [*const I; N],
    len: usize,
    g: impl Fn([I; N]) -> O,
) {
    const W: usize = IN_PLACE_CHUNK;
    let full = len / W * W;
    let mut j = 0;
    while j < full {
        // SAFETY: j + W <= len elements of every operand (caller contract).
        unsafe {
            let x: [[I; W]; N] = std::array::from_fn(|k| std::array::from_fn(|l| *ins[k].add(j + l)));
            let y: [O; W] = std::array::from_fn(|l| g(std::array::from_fn(|k| x[k][l])));
            for (l, v) in y.into_iter().enumerate() {
                *out.add(j + l) = v;
            }
        }
        j += W;
    }
    for j in full..len {
        // SAFETY: j < len (caller contract).
        unsafe { *out.add(j) = g(std::array::from_fn(|k| *ins[k].add(j))) };
    }
}

/// Elements [`in_place_chunks`] loads before it stores: one 512-bit vector of float32.
pub const IN_PLACE_CHUNK: usize = 16;

/// The body of [`map`] and [`map_in_place`]: `in_place` says whether `f` handles an
/// aliased block itself (see [`map_in_place`]) or gets a staged copy.
unsafe fn drive<I: Element, O: Element, const N: usize>(
    it: &TensorIter,
    f: impl Fn(*mut O, [*const I; N], usize, bool) + Sync,
    in_place: bool,
) -> Result<()> {
    assert!(it.ntensors() == N + 1, "map: {} operands for arity {N}", it.ntensors());
    // A complex input would lose its imaginary part in a real compute type;
    // a complex output of a real computation just gets imaginary part 0.
    for k in 0..=N {
        let complex = matches!(it.dtype(k), DType::C32 | DType::C64 | DType::C128);
        if !complex || (I::COMPLEX && k > 0) || (k == 0 && (it.dtype(k) != DType::C32 || O::DTYPE == DType::C32)) {
            continue;
        }
        return Err(Error::UnsupportedDtype { op: "pointwise", dtype: it.dtype(k) });
    }
    let numel = it.numel();
    let error = std::sync::Mutex::new(None);
    // Staging buffers only for operands that need them, sized to the work (small calls stay cheap).
    it.parallel_ranges(numel, |start, end| {
        let cap = BLOCK.min(end - start).max(1);
        let mut bufs: Vec<Vec<I>> = (0..N).map(|_| Vec::new()).collect();
        let mut obuf: Vec<O> = Vec::new();
        // A broadcast input (inner stride 0, such as the CPU scalar of `x * 0.5`)
        // holds one value per row: its staging buffer is filled once and reused
        // while the value's address stays the same, instead of being reconverted
        // for every block (which made `x * 0.5` three times slower than `x * y`).
        let mut filled_from = [std::ptr::null::<u8>(); N];
        let mut filled_len = [0usize; N];
        it.for_each_row_in(start, end, |offs, len| {
            let mut b = 0;
            while b < len {
                let n = BLOCK.min(len - b);
                let mut ins = [std::ptr::null::<I>(); N];
                for k in 0..N {
                    let op = it.operands[k + 1];
                    let s = it.inner_stride(k + 1);
                    // SAFETY: in-bounds by the iterator's construction.
                    let p = unsafe { op.ptr.offset(offs[k + 1] + b as isize * s) };
                    if op.dtype == I::DTYPE && s == std::mem::size_of::<I>() as isize {
                        ins[k] = p as *const I;
                    } else if s == 0 && std::ptr::eq(filled_from[k], p) && filled_len[k] >= n {
                        ins[k] = bufs[k].as_ptr();
                    // SAFETY: in-bounds by the iterator's construction.
                    } else if let Err(e) = unsafe {
                        if bufs[k].is_empty() {
                            bufs[k] = vec![I::from_i64(0); cap];
                        }
                        load::<I>(op.dtype, p, s, n, &mut bufs[k])
                    } {
                        *error.lock().unwrap() = Some(e);
                        return;
                    } else {
                        if let Some(h) = it.round_through.filter(|&h| h != op.dtype) {
                            round_to(h, &mut bufs[k][..n]);
                        }
                        ins[k] = bufs[k].as_ptr();
                        (filled_from[k], filled_len[k]) =
                            if s == 0 { (p as *const u8, n) } else { (std::ptr::null(), 0) };
                    }
                }
                let out = it.operands[0];
                let s = it.inner_stride(0);
                // SAFETY: as above.
                let p = unsafe { out.ptr.offset(offs[0] + b as isize * s) };
                if out.dtype == O::DTYPE && s == std::mem::size_of::<O>() as isize {
                    // In-place ops pass the output as an input. LLVM's runtime alias check
                    // treats exact aliasing as overlap and would run the scalar loop, so
                    // unless `f` loads before it stores (`in_place`), the aliased input is
                    // read from a copy of the block instead (L1-resident).
                    let mut aliased = false;
                    for k in 0..N {
                        if std::ptr::eq(ins[k] as *const u8, p) && I::DTYPE == O::DTYPE {
                            aliased = true;
                            if in_place {
                                continue;
                            }
                            if bufs[k].is_empty() {
                                bufs[k] = vec![I::from_i64(0); cap];
                            }
                            // SAFETY: `n` elements of I at ins[k] (checked contiguous above).
                            unsafe { convert::copy_elements(ins[k], bufs[k].as_mut_ptr(), n) };
                            ins[k] = bufs[k].as_ptr();
                            filled_from[k] = std::ptr::null();
                        }
                    }
                    f(p as *mut O, ins, n, aliased && in_place);
                    if let Some(h) = it.round_through.filter(|&h| h != out.dtype) {
                        // SAFETY: the `n` output elements just written (contiguous, of O).
                        round_to(h, unsafe { std::slice::from_raw_parts_mut(p as *mut O, n) });
                    }
                } else {
                    if obuf.is_empty() {
                        obuf = vec![O::from_i64(0); cap];
                    }
                    f(obuf.as_mut_ptr(), ins, n, false);
                    // CPU computes into a temporary of the half-precision common dtype and
                    // copies that into an output of another dtype: round through it.
                    if let Some(h) = it.round_through.filter(|&h| h != out.dtype) {
                        round_to(h, &mut obuf[..n]);
                    }
                    // SAFETY: `p` addresses n output elements of the row (in bounds by the iterator's construction).
                    if let Err(e) = unsafe { store::<O>(out.dtype, p, s, &obuf[..n]) } {
                        *error.lock().unwrap() = Some(e);
                        return;
                    }
                }
                b += n;
            }
        });
    });
    match error.into_inner().unwrap() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn chunk_and_run_helpers_cover_every_index_once_in_order() {
        for (len, size, tasks) in [(0, 3, 2), (10, 3, 1), (10, 3, 2), (10, 3, 8), (7, 7, 2), (5, 0, 2), (100, 1, 3)] {
            let mut data = vec![0usize; len];
            for_each_chunk_mut(&mut data, size, tasks, |i, c| {
                assert!(c.len() <= size && !c.is_empty());
                c.iter_mut().for_each(|v| *v += i + 1);
            });
            let want: Vec<usize> = if size == 0 { vec![0; len] } else { (0..len).map(|j| j / size + 1).collect() };
            assert_eq!(data, want, "len {len} size {size} tasks {tasks}");
            assert_eq!(map_in_runs(len, tasks, |i| i * 2), (0..len).map(|i| i * 2).collect::<Vec<_>>());
        }
        // The lowest-numbered failing chunk's error wins; earlier chunks still ran.
        let mut data = vec![0u8; 40];
        let r = try_for_each_chunk_mut(&mut data, 4, 2, |i, c| {
            c.fill(1);
            if i == 3 || i == 7 {
                Err(i)
            } else {
                Ok(())
            }
        });
        assert_eq!(r, Err(3));
        assert!(data[..16].iter().all(|&v| v == 1));
        assert_eq!(try_for_each_task(3, |t| if t > 0 { Err(t) } else { Ok(()) }), Err(1));
        assert_eq!(try_for_each_task::<()>(3, |_| Ok(())), Ok(()));
    }

    #[test]
    fn tasks_run_once_each_on_the_caller_or_the_team() {
        use std::sync::Mutex;
        let threads = rayon::current_num_threads();
        for tasks in [0, 1, 2, threads, threads + 3] {
            let runs = |_: ()| {
                let seen = Mutex::new(vec![]);
                for_each_task(tasks, |t| {
                    // More tasks than threads still run on the team (dynamic schedule), not on rayon's pool.
                    assert!(rayon::current_thread_index().is_none());
                    let me = std::thread::current();
                    seen.lock().unwrap().push((t, format!("{:?}", me.id()), me.name().unwrap_or("").to_string()))
                });
                let mut seen = seen.into_inner().unwrap();
                seen.sort();
                seen
            };
            let (first, second) = (runs(()), runs(()));
            assert_eq!(first.iter().map(|p| p.0).collect::<Vec<_>>(), (0..tasks).collect::<Vec<_>>());
            if (2..=threads).contains(&tasks) {
                // On the team: task 0 on the caller; task t on its worker, or on the
                // caller when the worker had not claimed it yet (see team.rs).
                let caller = format!("{:?}", std::thread::current().id());
                for run in [&first, &second] {
                    assert_eq!(run[0].1, caller);
                    for (t, id, name) in &run[1..] {
                        assert!(id == &caller || name == &format!("oxide-team-{t}"), "task {t} ran on {name}");
                    }
                }
            }
            assert_eq!(map_tasks(tasks, |t| t * 10), (0..tasks).map(|t| t * 10).collect::<Vec<_>>());
        }
        // Nested inside the pool, tasks are work-stolen and still each run once.
        let nested = Mutex::new(vec![]);
        rayon::scope(|s| s.spawn(|_| for_each_task(threads.max(2), |t| nested.lock().unwrap().push(t))));
        let mut nested = nested.into_inner().unwrap();
        nested.sort();
        assert_eq!(nested, (0..threads.max(2)).collect::<Vec<_>>());
    }

    fn op<T>(p: &mut [T], dtype: DType) -> Operand {
        Operand { ptr: p.as_mut_ptr() as *mut u8, dtype }
    }

    #[test]
    fn rows_cover_ranges_exactly_once() {
        let mut a = [0f32; 24];
        // A (4, 3, 2) space (dim 0 fastest) over a transposed buffer.
        let it = TensorIter::new("t", &[4, 3, 2], vec![(op(&mut a, DType::F32), &[12, 16, 48][..])], 1, 1).unwrap();
        for (start, end) in [(0, 24), (5, 17), (3, 4), (23, 24)] {
            let mut seen = vec![];
            it.for_each_row_in(start, end, |o, len| (0..len as isize).for_each(|i| seen.push((o[0] + i * 12) / 4)));
            let mut want: Vec<isize> = (start..end)
                .map(|l| {
                    let (i, j, k) = (l % 4, (l / 4) % 3, l / 12);
                    (i * 3 + j * 4 + k * 12) as isize
                })
                .collect();
            seen.sort();
            want.sort();
            assert_eq!(seen, want, "range {start}..{end}");
        }
    }

    #[test]
    fn descriptions_are_inline_up_to_their_limits_and_spill_beyond() {
        let mut a = [0f32; 256];
        let mut b = [0f32; 256];
        let mut c = [0f32; 256];
        // A binary op with an output over 6 dimensions: nothing on the heap.
        let dims6 = [2i64; 6];
        let s6 = [1i64, 2, 4, 8, 16, 32];
        let it = TensorIter::new(
            "t",
            &dims6,
            vec![
                (op(&mut a, DType::F32), &s6[..]),
                (op(&mut b, DType::F32), &s6[..]),
                (op(&mut c, DType::F32), &s6[..]),
            ],
            1,
            1,
        )
        .unwrap();
        assert!(!it.shape.spilled() && !it.operands.spilled() && !it.strides.spilled());
        assert!(it.strides.iter().all(|s| !s.spilled()));
        // 8 dimensions and 5 operands spill to the heap and iterate the same way.
        let dims8 = [2i64; 8];
        let s8: Vec<i64> = (0..8).map(|d| 4 << d).collect();
        let (mut d, mut e) = ([0f32; 256], [0f32; 256]);
        let operands = vec![
            (op(&mut a, DType::F32), &s8[..]),
            (op(&mut b, DType::F32), &s8[..]),
            (op(&mut c, DType::F32), &s8[..]),
            (op(&mut d, DType::F32), &s8[..]),
            (op(&mut e, DType::F32), &s8[..]),
        ];
        let it = TensorIter::new("t", &dims8, operands, 1, 1).unwrap();
        assert!(it.shape.spilled() && it.operands.spilled() && it.strides[0].spilled());
        assert_eq!((it.numel(), it.ntensors(), it.inner_stride(4)), (256, 5, 4));
        let mut seen = vec![];
        it.for_each_row_in(0, 256, |o, len| (0..len as isize).for_each(|i| seen.push((o[4] + i * 4) / 4)));
        assert_eq!(seen, (0..256).collect::<Vec<isize>>());
        // Still validated: a stride array of the wrong length.
        assert!(TensorIter::new("t", &dims8, vec![(op(&mut a, DType::F32), &s6[..])], 1, 1).is_err());
    }

    #[test]
    fn map_converts_broadcasts_and_writes_strided() {
        // out (int64, stride 2) = a (float32, contiguous) + b (int32 scalar, stride 0), 0-size, 0-dim.
        let mut out = [0i64; 6];
        let mut a = [1.5f32, 2.5, -3.5];
        let mut b = [10i32];
        let it = TensorIter::new(
            "t",
            &[3],
            vec![
                (op(&mut out, DType::I64), &[16][..]),
                (op(&mut a, DType::F32), &[4][..]),
                (op(&mut b, DType::I32), &[0][..]),
            ],
            1,
            2,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe {
            map::<f32, f32, 2>(&it, |o, [x, y], n| {
                for i in 0..n {
                    *o.add(i) = *x.add(i) + *y.add(i);
                }
            })
        }
        .unwrap();
        assert_eq!(out, [11, 0, 12, 0, 6, 0]);
        let it = TensorIter::new(
            "t",
            &[],
            vec![(op(&mut out, DType::I64), &[][..]), (op(&mut b, DType::I32), &[][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { map::<i64, i64, 1>(&it, |o, [x], n| (0..n).for_each(|i| *o.add(i) = *x.add(i) * 2)) }.unwrap();
        assert_eq!(out[0], 20);
        let it = TensorIter::new(
            "t",
            &[0],
            vec![(op(&mut out, DType::I64), &[8][..]), (op(&mut b, DType::I32), &[4][..])],
            1,
            1,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { map::<i64, i64, 1>(&it, |_, _, _| panic!("no elements")) }.unwrap();
    }

    #[test]
    fn map_in_place_hands_aliased_blocks_to_the_chunked_loop() {
        // a = a * b + c in place over lengths around the chunk and block sizes (tails
        // included), against the same expression computed out of place.
        for n in [1, IN_PLACE_CHUNK - 1, IN_PLACE_CHUNK + 3, BLOCK + 5, 3 * BLOCK + IN_PLACE_CHUNK + 7] {
            let mut a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
            let mut b: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
            let mut c: Vec<f32> = (0..n).map(|i| (i % 5) as f32 * 0.25).collect();
            let want: Vec<f32> = (0..n).map(|i| a[i] * b[i] + c[i]).collect();
            let ap = op(&mut a, DType::F32);
            let operands = vec![
                (ap, &[4][..]),
                (ap, &[4][..]),
                (op(&mut b, DType::F32), &[4][..]),
                (op(&mut c, DType::F32), &[4][..]),
            ];
            let it = TensorIter::new("t", &[n as i64], operands, 1, 2).unwrap();
            let (aliased_blocks, plain_blocks) = (AtomicUsize::new(0), AtomicUsize::new(0));
            // SAFETY: the pointers address live local buffers sized for the call; the output is exactly input 0.
            unsafe {
                map_in_place::<f32, f32, 3>(&it, true, |o, ins, len, aliased| {
                    if aliased {
                        aliased_blocks.fetch_add(1, Ordering::Relaxed);
                        in_place_chunks(o, ins, len, |x: [f32; 3]| x[0] * x[1] + x[2]);
                    } else {
                        plain_blocks.fetch_add(1, Ordering::Relaxed);
                    }
                })
            }
            .unwrap();
            assert_eq!(a, want, "n = {n}");
            assert!(aliased_blocks.load(Ordering::Relaxed) >= 1 && plain_blocks.load(Ordering::Relaxed) == 0);
            // Without `chunks` the block function sees a staged copy, never `aliased`.
            let it = TensorIter::new("t", &[n as i64], vec![(ap, &[4][..]), (ap, &[4][..])], 1, 1).unwrap();
            // SAFETY: as above.
            unsafe {
                map_in_place::<f32, f32, 1>(&it, false, |o, [x], len, aliased| {
                    assert!(!aliased && !std::ptr::eq(o as *const f32, x));
                    (0..len).for_each(|i| *o.add(i) = -*x.add(i));
                })
            }
            .unwrap();
            assert!(a.iter().zip(&want).all(|(x, y)| *x == -*y), "n = {n}");
        }
    }

    #[test]
    fn parallel_map_matches_serial() {
        let n = 3 * GRAIN + 17;
        let mut a: Vec<f64> = (0..n).map(|i| i as f64).collect();
        let mut out = vec![0f64; n];
        let it = TensorIter::new(
            "t",
            &[n as i64],
            vec![(op(&mut out, DType::F64), &[8][..]), (op(&mut a, DType::F64), &[8][..])],
            1,
            4,
        )
        .unwrap();
        // SAFETY: the pointers address live local buffers sized for the call.
        unsafe { map::<f64, f64, 1>(&it, |o, [x], n| (0..n).for_each(|i| *o.add(i) = *x.add(i) * 3.0)) }.unwrap();
        assert!(out.iter().enumerate().all(|(i, &v)| v == 3.0 * i as f64));
    }
}
