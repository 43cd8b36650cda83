//! Layout as a value: a shape plus one stride array per operand, in elements.
//! [`Layout::coalesced`] merges dimensions that are contiguous with each
//! other in every operand, which turns most real layouts into one or two
//! dimensions before a loop runs.

use crate::error::{Error, Result};

/// A shape and the strides of `N` operands over it (elements, may be 0 or negative).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout<const N: usize> {
    pub shape: Vec<usize>,
    pub strides: [Vec<isize>; N],
}

impl<const N: usize> Layout<N> {
    /// Builds a layout, checking that every stride array has one entry per dimension.
    ///
    /// Errors: [`Error::InvalidLayout`].
    pub fn new(op: &'static str, shape: &[i64], strides: [&[i64]; N]) -> Result<Layout<N>> {
        if let Some(s) = strides.iter().find(|s| s.len() != shape.len()) {
            return Err(Error::InvalidLayout {
                op,
                reason: format!("{} strides for {} dimensions", s.len(), shape.len()),
            });
        }
        let shape = shape
            .iter()
            .map(|&d| {
                usize::try_from(d).map_err(|_| Error::InvalidLayout { op, reason: format!("negative extent {d}") })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Layout { shape, strides: strides.map(|s| s.iter().map(|&x| x as isize).collect()) })
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same iteration space with size-1 dimensions dropped and adjacent
    /// dimensions merged where `stride[d] == stride[d+1] * shape[d+1]` holds for every operand.
    pub fn coalesced(&self) -> Layout<N> {
        let mut shape: Vec<usize> = Vec::with_capacity(self.shape.len());
        let mut strides: [Vec<isize>; N] = std::array::from_fn(|_| Vec::new());
        for d in 0..self.shape.len() {
            let n = self.shape[d];
            if n == 1 {
                continue;
            }
            let mergeable = shape
                .last()
                .is_some_and(|_| (0..N).all(|k| *strides[k].last().unwrap() == self.strides[k][d] * n as isize));
            if mergeable {
                *shape.last_mut().unwrap() *= n;
                for (merged, own) in strides.iter_mut().zip(&self.strides) {
                    *merged.last_mut().unwrap() = own[d];
                }
            } else {
                shape.push(n);
                for (merged, own) in strides.iter_mut().zip(&self.strides) {
                    merged.push(own[d]);
                }
            }
        }
        Layout { shape, strides }
    }

    /// Calls `f(offsets, len)` for each innermost row, where `offsets[k]` is
    /// operand k's element offset of the row's first element and rows run
    /// along the last dimension (`len` elements, stride `strides[k][last]`).
    /// 0-dim layouts give one row of length 1; empty layouts give none.
    pub fn for_each_row(&self, mut f: impl FnMut([isize; N], usize)) {
        if self.numel() == 0 {
            return;
        }
        let nd = self.shape.len();
        if nd == 0 {
            f([0; N], 1);
            return;
        }
        let inner = self.shape[nd - 1];
        let mut index = vec![0usize; nd - 1];
        let mut offsets = [0isize; N];
        loop {
            f(offsets, inner);
            // Odometer increment over the outer dimensions, fixing offsets incrementally.
            let mut d = nd - 1;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                index[d] += 1;
                for (o, s) in offsets.iter_mut().zip(&self.strides) {
                    *o += s[d];
                }
                if index[d] < self.shape[d] {
                    break;
                }
                for (o, s) in offsets.iter_mut().zip(&self.strides) {
                    *o -= s[d] * self.shape[d] as isize;
                }
                index[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_contiguous_transposed_broadcast() {
        let l = Layout::new("t", &[2, 3, 4], [&[12, 4, 1], &[12, 4, 1]]).unwrap().coalesced();
        assert_eq!((l.shape, l.strides), (vec![24], [vec![1], vec![1]]));
        let l = Layout::new("t", &[3, 4], [&[4, 1], &[1, 3]]).unwrap().coalesced();
        assert_eq!(l.shape, vec![3, 4]);
        let l = Layout::new("t", &[1, 5, 1], [&[5, 1, 1], &[0, 0, 0]]).unwrap().coalesced();
        assert_eq!((l.shape, l.strides), (vec![5], [vec![1], vec![0]]));
        assert!(Layout::new("t", &[2], [&[1, 1]]).is_err());
        assert!(Layout::new("t", &[-1], [&[1]]).is_err());
    }

    #[test]
    fn rows_visit_every_element_once() {
        let l = Layout::new("t", &[2, 3, 2], [&[1, 2, 6]]).unwrap();
        let mut seen = vec![];
        l.for_each_row(|[o], n| (0..n as isize).for_each(|i| seen.push(o + i * 6)));
        seen.sort();
        assert_eq!(seen, (0..12).collect::<Vec<_>>());
        let mut rows = 0;
        Layout::<1>::new("t", &[], [&[]]).unwrap().for_each_row(|_, n| rows += n);
        Layout::<1>::new("t", &[3, 0], [&[0, 1]]).unwrap().for_each_row(|_, n| rows += n);
        assert_eq!(rows, 1);
    }
}
