//! [`ItemQueue`]: WFQ over caller objects identified by an opaque `u64` id
//! (the binding uses the Python object's address), the way the vLLM queues
//! keep their registry in the core (`crate::request_queue`).
//!
//! On top of [`Wfq`] it keeps
//! - the identity map: id -> live heap handles (an object may be queued more
//!   than once), so removal, re-keying and tag lookups by object are
//!   O(1) + O(log n);
//! - the tags of popped objects, so [`ItemQueue::readd`] puts a preempted
//!   object back with its original virtual start/finish, arrival and
//!   insertion order. Whether an id still names the object that was popped
//!   is the caller's business (the binding checks a weak reference and calls
//!   [`ItemQueue::forget`] for objects that died).

use std::hash::Hash;

use super::state::ParsedState;
use super::{Tags, VirtualClock, Wfq};
use crate::error::{Error, Result};
use crate::heap::Handle;
use crate::registry::{IdMap, Registry};

/// WFQ over identified objects (see the module docs).
#[derive(Debug, Clone)]
pub struct ItemQueue<K, V> {
    core: Wfq<K, (u64, V)>,
    handles: Registry<Handle>,
    departed: IdMap<Tags<K>>,
}

impl<K: Hash + Eq + Clone, V> ItemQueue<K, V> {
    pub fn with_clock(clock: VirtualClock) -> Self {
        ItemQueue {
            core: Wfq::with_clock(clock),
            handles: Registry::new(),
            departed: IdMap::default(),
        }
    }

    /// The underlying queue (virtual time, flows, previews).
    pub fn wfq(&self) -> &Wfq<K, (u64, V)> {
        &self.core
    }
    pub fn len(&self) -> usize {
        self.core.len()
    }
    pub fn is_empty(&self) -> bool {
        self.core.is_empty()
    }
    /// Whether object `id` is queued.
    pub fn contains(&self, id: u64) -> bool {
        self.handles.contains(id)
    }

    /// The handle of `id` that comes first in queue order.
    fn first_handle(&self, id: u64) -> Option<Handle> {
        self.handles
            .get(id)
            .iter()
            .copied()
            .min_by_key(|&h| self.core.get(h).expect("live handle").1.queue_order())
    }

    /// Queue object `id` (see [`Wfq::add`]); forgets tags it was popped with.
    pub fn add(
        &mut self,
        id: u64,
        value: V,
        flow: Option<K>,
        tokens: f64,
        weight: f64,
        arrival: f64,
    ) -> Result<()> {
        let h = self.core.add((id, value), flow, tokens, weight, arrival)?;
        self.handles.insert(id, h);
        self.departed.remove(&id);
        Ok(())
    }

    /// Put back a popped object with the tags it was popped with, its flow
    /// replaced by `flow` (the caller's current id for the same flow).
    /// `Key` error if `id` was not popped (or was forgotten).
    pub fn readd(&mut self, id: u64, value: V, flow: Option<K>) -> Result<()> {
        let mut tags = self
            .departed
            .get(&id)
            .cloned()
            .ok_or_else(|| Error::key("item was not popped from this queue"))?;
        tags.flow = flow;
        let h = self.core.readd((id, value), tags)?;
        self.handles.insert(id, h);
        self.departed.remove(&id);
        Ok(())
    }

    /// Pop the next object (see [`Wfq::pop`]) and remember its tags.
    pub fn pop(&mut self) -> Option<(u64, V, &Tags<K>)> {
        let h = self.core.peek_handle()?;
        let ((id, value), tags) = self.core.pop().expect("non-empty");
        self.handles.remove(id, h);
        let tags = match self.departed.entry(id) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                e.insert(tags);
                e.into_mut()
            }
            std::collections::hash_map::Entry::Vacant(e) => e.insert(tags),
        };
        Some((id, value, tags))
    }

    /// The object `pop` would return.
    pub fn peek(&self) -> Option<&V> {
        self.core.peek().map(|(_, (_, v), _)| v)
    }

    /// Remove the first queued occurrence of `id`; `None` if not queued.
    /// `V` and `F_last` are not rewound.
    pub fn discard(&mut self, id: u64) -> Option<V> {
        let h = self.first_handle(id)?;
        let ((_, value), _) = self.core.remove(h).expect("live handle");
        self.handles.remove(id, h);
        Some(value)
    }

    /// Partial prefill of the first queued occurrence of `id` (see
    /// [`Wfq::update_remaining`]); `Key` error if not queued.
    pub fn update_remaining(&mut self, id: u64, remaining: f64) -> Result<f64> {
        let h = self
            .first_handle(id)
            .ok_or_else(|| Error::key("update_remaining(item): item not in queue"))?;
        self.core.update_remaining(h, remaining)
    }

    /// See [`Wfq::refund_flow`].
    pub fn refund_flow(&mut self, flow: &K, tokens: f64, weight: f64) -> Result<f64> {
        self.core.refund_flow(flow, tokens, weight)
    }

    /// Tags of the first queued occurrence of `id`.
    pub fn tags(&self, id: u64) -> Option<Tags<K>> {
        let h = self.first_handle(id)?;
        Some(self.core.get(h).expect("live handle").1)
    }

    /// Tags `id` was popped with, if remembered.
    pub fn departed(&self, id: u64) -> Option<&Tags<K>> {
        self.departed.get(&id)
    }
    /// Drop the remembered tags of `id`; whether there were any.
    pub fn forget(&mut self, id: u64) -> bool {
        self.departed.remove(&id).is_some()
    }
    /// Keep only the remembered tags whose id passes `keep`.
    pub fn retain_departed(&mut self, mut keep: impl FnMut(u64) -> bool) {
        self.departed.retain(|&id, _| keep(id));
    }
    pub fn departed_len(&self) -> usize {
        self.departed.len()
    }

    /// Queued objects in pop order.
    pub fn iter_sorted(&self) -> impl Iterator<Item = &V> + '_ {
        self.core.iter_sorted().map(|(_, (_, v))| v)
    }
    /// Queued objects in arbitrary order.
    pub fn iter_unordered(&self) -> impl Iterator<Item = &V> + '_ {
        self.core.iter_unordered().map(|(_, (_, v))| v)
    }

    /// Restore a parsed state (see [`super::state`]); forgets remembered
    /// tags of popped objects (identities do not survive a restart).
    pub fn load_state(&mut self, state: ParsedState<K>) -> Result<()> {
        self.core.load_state(state)?;
        self.departed.clear();
        Ok(())
    }

    /// Flow keys whose state was dropped since the last call.
    pub fn drain_dropped_flows(&mut self) -> std::vec::Drain<'_, K> {
        self.core.drain_dropped_flows()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_map_and_departed_tags() {
        let mut q: ItemQueue<u32, &str> = ItemQueue::with_clock(VirtualClock::Start);
        q.add(1, "a", Some(7), 10.0, 1.0, 0.0).unwrap();
        q.add(2, "b", Some(7), 10.0, 1.0, 0.0).unwrap();
        q.add(1, "a again", None, 1.0, 1.0, 0.0).unwrap();
        assert!(q.contains(1) && q.len() == 3);
        // the first occurrence of 1 in queue order is the one with F = 1
        assert_eq!(q.tags(1).unwrap().finish, 1.0);
        assert_eq!(q.discard(1), Some("a again"));
        assert_eq!(q.tags(1).unwrap().finish, 10.0);
        let (id, v, t) = q.pop().unwrap();
        assert_eq!((id, v, t.finish), (1, "a", 10.0));
        assert!(!q.contains(1) && q.departed(1).is_some());
        // preempted: back in its old place, ahead of b
        q.readd(1, "a", Some(7)).unwrap();
        assert!(q.departed(1).is_none());
        assert_eq!(q.peek(), Some(&"a"));
        assert!(matches!(q.readd(9, "x", None), Err(Error::Key(_))));
        assert!(matches!(q.update_remaining(9, 1.0), Err(Error::Key(_))));
        assert_eq!(q.update_remaining(2, 0.0).unwrap(), 10.0);
        assert_eq!(q.iter_sorted().copied().collect::<Vec<_>>(), ["a", "b"]);
        q.pop();
        assert!(q.forget(1) && !q.forget(1));
    }

    #[test]
    fn preview_batch_chains_per_flow() {
        let mut q: ItemQueue<u32, ()> = ItemQueue::with_clock(VirtualClock::Start);
        q.add(1, (), Some(0), f64::MAX / 2.0, 1.0, 0.0).unwrap();
        let w = q.wfq();
        // alone each would fit; chained on flow 0's F_last they overflow
        assert!(w
            .preview_batch([(Some(&1), f64::MAX / 2.0, 1.0, 0.0)])
            .is_ok());
        assert!(w
            .preview_batch([(Some(&0), f64::MAX / 3.0, 1.0, 0.0)])
            .is_ok());
        let two = [
            (Some(&0), f64::MAX / 3.0, 1.0, 0.0),
            (Some(&0), f64::MAX / 3.0, 1.0, 0.0),
        ];
        assert!(matches!(w.preview_batch(two), Err(Error::Value(_))));
        assert!(matches!(
            w.preview_batch([(None, 1.0, 0.0, 0.0)]),
            Err(Error::Value(_))
        ));
    }
}
