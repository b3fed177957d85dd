//! Places for what strangers can make the far side hold before they are authenticated
//! (QUIC handshakes in progress, TCP-fallback connections), bounded in all and per source
//! address: a near side needs only one or a few, so one address cannot take the places
//! every near side needs.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The places of one kind, and how many each address holds.
#[derive(Debug, Clone)]
pub(crate) struct Places {
    held: Arc<Mutex<Held>>,
    max: usize,
    per_address: usize,
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_address: HashMap<IpAddr, usize>,
}

/// One place, given back when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    places: Places,
    from: IpAddr,
}

impl Places {
    /// At most `max` places, `per_address` of them for one address.
    pub(crate) fn new(max: usize, per_address: usize) -> Places {
        Places {
            held: Arc::default(),
            max,
            per_address,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for `from`, unless every place is held, or `per_address` by `from`.
    pub(crate) fn take(&self, from: IpAddr) -> Option<Place> {
        let mut held = self.lock();
        let mine = held.by_address.get(&from).copied().unwrap_or(0);
        if held.total >= self.max || mine >= self.per_address {
            return None;
        }
        held.total += 1;
        *held.by_address.entry(from).or_default() += 1;
        Some(Place {
            places: self.clone(),
            from,
        })
    }

    /// How many places are held now.
    pub(crate) fn held(&self) -> usize {
        self.lock().total
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut held = self.places.lock();
        held.total -= 1;
        if let Some(count) = held.by_address.get_mut(&self.from) {
            *count -= 1;
            if *count == 0 {
                held.by_address.remove(&self.from);
            }
        }
    }
}
