//! Sorting through one instantiation: each element type given to `sort`/`sort_by` costs the binary
//! a full sort implementation (about 4 KiB), so the shim's few sorts order indices with a comparator
//! trait object instead, and then move the elements into that order.

use std::cmp::Ordering;

/// Sorts `items` by `cmp`, stably (equal elements keep their order).
pub(crate) fn sort_by<T>(items: Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    let order = indices(items.len(), &|a, b| cmp(&items[a], &items[b]));
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

/// The indices `0..n` in the order `cmp` gives them, ties broken by index (so the sort is stable).
fn indices(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_unstable_by(|&a, &b| cmp(a, b).then(a.cmp(&b)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_stably() {
        let v = vec![(2, 'a'), (1, 'b'), (2, 'c'), (0, 'd'), (1, 'e')];
        let sorted = sort_by(v, |a, b| a.0.cmp(&b.0));
        assert_eq!(sorted, [(0, 'd'), (1, 'b'), (1, 'e'), (2, 'a'), (2, 'c')]);
        assert!(sort_by(Vec::<u8>::new(), u8::cmp).is_empty());
    }
}
