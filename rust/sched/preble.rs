//! Preble's local wait queue: a multi-level priority queue keyed by each
//! request's cache-hit ratio, served one level per scheduling step in a
//! round-robin with a quota that grows with the level (Preble's "fcfs-mpq"
//! schedule heuristic, its local scheduler in the DLPM paper's Section 7.1
//! comparison). Selected as an LPM rule (`LpmRule::multi_priority`), so it
//! matches prefixes against the same radix tree, through LPM's own
//! [`PrefixIndex`]: [`Preble`] is the order LPM's pass walks in its place
//! (`sched/lpm.rs`).
//!
//! What Preble does (read in WukLab/preble at commit
//! `8e7906a3b76693c9003d1c7115b8011296c867e1`,
//! `python/sglang/srt/managers/router/model_rpc.py`: `ModelRpcServer.__init__`
//! (`multi_priority_queue`, `start_schedule_from`), `get_new_fill_batch_v2`,
//! `budget_forward_step`, `get_schedule_group`, `schedule_within_group`;
//! `python/sglang/srt/managers/router/scheduler.py`: `get_priority_queue`):
//!
//! * **Levels.** Ten wait queues, levels 0..=9. A newly arrived request
//!   waits in a plain arrival queue until the next scheduling step; then its
//!   prefix is matched against the worker's radix cache and it moves, once
//!   and for good, to level `0` if nothing matched, else
//!   `ceil(10 * matched / input_len) - 1`: level 9 holds hit ratios in
//!   (0.9, 1], level 0 holds [0, 0.1].
//! * **Which level a step serves.** One level per step. A pointer starts at
//!   level 9 and walks down cyclically (9, 8, ..., 0, 9, ...), skipping
//!   empty levels; the first non-empty level from the pointer is served and
//!   the pointer moves one below it. So every non-empty level is served at
//!   least once every ten steps: no request starves, whatever its hit ratio.
//! * **Quota.** A step serving level `l` admits at most `(l + 1) * k`
//!   requests, `k = 10` ("tune k to trade off between cache hit and
//!   fairness"): 100 from level 9, 10 from level 0. High-hit requests get
//!   more of the batch slots, low-hit ones a guaranteed share.
//! * **Within a level.** Arrival order (the heuristic's name starts with
//!   `fcfs`, so `get_priority_queue` sorts by arrival time); the prefix is
//!   re-matched for the admission itself, but the request keeps its level. A
//!   request that does not fit the step is skipped and the walk goes on
//!   (`schedule_within_group` only `break`s for `fcfs-s`); the walk ends when
//!   the quota or the step's token budget is used up.
//!
//! It has no per-client state: no isolation or fairness guarantee between
//! clients, only starvation freedom across hit-ratio levels.
//!
//! Here (fairq's step: a token `budget` and `max_requests`): the level is set
//! at the first `schedule` after the request joined (from the prefix
//! match then, after the facade's sync); the served level's quota is capped
//! by `max_requests`; a request whose extend tokens exceed what is left of
//! the budget is skipped. One deviation: the pointer moves past the served
//! level only when the step admitted something from it. Preble moves it
//! anyway and lets the step run decode only; fairq's facade instead retries
//! a call that admitted nothing under its oversize rule (`sched/mod.rs`),
//! and that retry must go to the same level (the level's oldest request,
//! admitted alone) for the rule to hold. `state` / `load_state` keep none
//! of this (an engine setting, as the LPM rule is): the levels are rebuilt
//! from the current matches.

use std::collections::{BTreeMap, HashMap};

use super::book::Book;
use super::prefix::PrefixIndex;

/// Number of priority levels (Preble: 10).
pub const LEVELS: usize = 10;
/// Requests a level-`l` step may admit: `(l + 1) * QUOTA_STEP` (Preble's `k`).
pub const QUOTA_STEP: usize = 10;

/// The level of a request with `matched` of its `input_len` tokens cached:
/// 0 without a hit, else `ceil(LEVELS * matched / input_len) - 1`.
pub fn level(matched: usize, input_len: usize) -> usize {
    if matched == 0 || input_len == 0 {
        return 0;
    }
    let l = (LEVELS * matched).div_ceil(input_len) - 1;
    l.min(LEVELS - 1)
}

/// The most requests one step serving `level` admits.
pub fn quota(level: usize) -> usize {
    (level + 1) * QUOTA_STEP
}

/// Preble's levels, the order an LPM scheduler with
/// `LpmRule::multi_priority` walks (over LPM's prefix index).
#[derive(Debug)]
pub(super) struct Preble {
    /// Arrived since the last `schedule`, not yet given a level: seq -> slot.
    fresh: BTreeMap<u64, u32>,
    /// The `LEVELS` levels, each in arrival order: seq -> slot.
    levels: Vec<BTreeMap<u64, u32>>,
    /// Where each leveled request waits: slot -> level.
    level_of: HashMap<u32, usize>,
    /// The level the next step looks at first (walks down, cyclically).
    next: usize,
    /// The level the current pass serves, and its position there.
    serving: Option<usize>,
    pos: Option<u64>,
}

impl Default for Preble {
    fn default() -> Self {
        Preble {
            fresh: BTreeMap::new(),
            levels: vec![BTreeMap::new(); LEVELS],
            level_of: HashMap::new(),
            next: LEVELS - 1,
            serving: None,
            pos: None,
        }
    }
}

impl Preble {
    /// Waiting request `r` (arrival `seq`) joins, without a level yet.
    pub fn enqueue(&mut self, seq: u64, r: u32) {
        self.fresh.insert(seq, r);
    }

    /// Waiting request `r` (arrival `seq`) leaves.
    pub fn dequeue(&mut self, seq: u64, r: u32) {
        match self.level_of.remove(&r) {
            Some(l) => {
                self.levels[l].remove(&seq);
            }
            None => {
                self.fresh.remove(&seq);
            }
        }
    }

    /// A pass begins: level the fresh requests (from their matches in
    /// `index` now) and pick the level to serve; returns the pass's cap.
    pub fn begin_pass<T>(
        &mut self,
        index: &PrefixIndex,
        book: &Book<T>,
        max_requests: usize,
    ) -> usize {
        for (seq, r) in std::mem::take(&mut self.fresh) {
            let l = level(index.match_len(r), book.req(r).input_len);
            self.levels[l].insert(seq, r);
            self.level_of.insert(r, l);
        }
        self.pos = None;
        // the first non-empty level from the pointer down, cyclically
        self.serving = (0..LEVELS)
            .map(|i| (self.next + LEVELS - i) % LEVELS)
            .find(|&l| !self.levels[l].is_empty());
        self.serving.map_or(0, |l| quota(l).min(max_requests))
    }

    /// The served level's next request in arrival order.
    pub fn next_candidate(&mut self) -> Option<u32> {
        let level = &self.levels[self.serving?];
        let (&seq, &r) = match self.pos {
            None => level.iter().next(),
            Some(s) => level.range(s + 1..).next(),
        }?;
        self.pos = Some(seq);
        Some(r)
    }

    /// The pass ended: the pointer moves below the served level if the pass
    /// admitted from it.
    pub fn end_pass(&mut self, admitted: usize) {
        if let (Some(l), true) = (self.serving, admitted > 0) {
            self.next = (l + LEVELS - 1) % LEVELS;
        }
    }

    pub fn check_invariants<T>(&self, book: &Book<T>) {
        let leveled: usize = self.levels.iter().map(BTreeMap::len).sum();
        assert_eq!(leveled + self.fresh.len(), book.waiting, "queued count");
        assert_eq!(leveled, self.level_of.len(), "level map size");
        for (l, q) in self.levels.iter().enumerate() {
            for (&seq, &r) in q {
                assert_eq!(book.req(r).seq, seq, "level key");
                assert_eq!(self.level_of.get(&r), Some(&l), "level map");
            }
        }
        for (&seq, &r) in &self.fresh {
            assert_eq!(book.req(r).seq, seq, "fresh key");
            assert!(!self.level_of.contains_key(&r), "fresh and leveled");
        }
        assert!(self.next < LEVELS);
    }
}
