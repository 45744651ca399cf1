//! Values shared by every handle of one client that names the same key: in-process state a
//! primitive keeps per client and per name (what its local waiters have learnt already, so
//! that they need not ask Redis again; its key names, made once rather than per handle).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::locking::lock;

type Cell = Weak<dyn Any + Send + Sync>;

/// The fewest entries the map holds before it looks for cells nobody holds any more.
const SWEEP_FROM: usize = 64;

/// The client's cells, by type and key. Each lives as long as someone holds it.
#[derive(Default)]
pub(crate) struct Cells {
    cells: Mutex<Map>,
}

#[derive(Default)]
struct Map {
    cells: HashMap<(TypeId, String), Cell>,
    /// Forget cells nobody holds when the map reaches this many entries: twice what a sweep
    /// left, so that a client making handles of many names sweeps in amortised constant time.
    sweep_at: usize,
}

impl Cells {
    /// The cell of type `T` under `key`, made by `init` if nobody holds one.
    pub(crate) fn get_or_init<T: Send + Sync + 'static>(
        &self,
        key: &str,
        init: impl FnOnce() -> T,
    ) -> Arc<T> {
        let mut map = lock(&self.cells);
        let id = (TypeId::of::<T>(), key.to_owned());
        if let Some(cell) = map.cells.get(&id).and_then(Weak::upgrade) {
            if let Ok(cell) = cell.downcast::<T>() {
                return cell;
            }
        }
        if map.cells.len() >= map.sweep_at {
            map.cells.retain(|_, cell| cell.strong_count() > 0);
            map.sweep_at = map.cells.len().saturating_mul(2).max(SWEEP_FROM);
        }
        let cell = Arc::new(init());
        let erased: Arc<dyn Any + Send + Sync> = cell.clone();
        map.cells.insert(id, Arc::downgrade(&erased));
        cell
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.cells).cells.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_of_one_key_share_a_cell_and_a_new_one_is_made_after_the_last_goes() {
        let cells = Cells::default();
        let a = cells.get_or_init("x", || 1u32);
        let b = cells.get_or_init("x", || 2u32);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*b, 1);
        // Another type under the same key is another cell.
        let c = cells.get_or_init("x", || 3u64);
        assert_eq!(*c, 3);
        drop((a, b));
        assert_eq!(*cells.get_or_init("x", || 4u32), 4);
    }

    #[test]
    fn cells_nobody_holds_are_forgotten() {
        let cells = Cells::default();
        for i in 0..10 * SWEEP_FROM {
            drop(cells.get_or_init(&i.to_string(), || i));
        }
        assert!(cells.len() <= SWEEP_FROM, "{} entries", cells.len());
        let held: Vec<_> = (0..4 * SWEEP_FROM)
            .map(|i| cells.get_or_init(&format!("held {i}"), || i))
            .collect();
        assert!(cells.len() <= 2 * held.len() + SWEEP_FROM);
        assert!(held.iter().enumerate().all(|(i, cell)| **cell == i));
    }
}
