//! Values shared by every handle of one client that names the same key: in-process state a
//! primitive keeps per client and per name (what its local waiters have learnt already), so
//! that they need not ask Redis again.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::locking::lock;

type Cell = Weak<dyn Any + Send + Sync>;

/// The client's cells, by type and key. Each lives as long as someone holds it.
#[derive(Default)]
pub(crate) struct Cells {
    cells: Mutex<HashMap<(TypeId, String), Cell>>,
}

impl Cells {
    pub(crate) fn get<T: Default + Send + Sync + 'static>(&self, key: &str) -> Arc<T> {
        let mut cells = lock(&self.cells);
        let id = (TypeId::of::<T>(), key.to_owned());
        if let Some(cell) = cells.get(&id).and_then(Weak::upgrade) {
            if let Ok(cell) = cell.downcast::<T>() {
                return cell;
            }
        }
        // Forget cells nobody holds any more before adding one.
        cells.retain(|_, cell| cell.strong_count() > 0);
        let cell = Arc::new(T::default());
        let erased: Arc<dyn Any + Send + Sync> = cell.clone();
        cells.insert(id, Arc::downgrade(&erased));
        cell
    }
}
