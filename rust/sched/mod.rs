//! Local (per-worker) schedulers: FCFS, LPM, VTC, DLPM and LAS behind one
//! facade.
//!
//! [`LocalScheduler`] holds the waiting and running requests of one worker
//! and admits waiting requests into a batch under a token budget
//! ([`LocalScheduler::schedule`]). The policy ([`Policy`]) only changes the
//! admission order and the counters charged; each lives in its own module:
//!
//! | module | concept |
//! |---|---|
//! | `mod.rs` (here) | the facade: [`Admission`], [`LocalScheduler`] (validation, the tree binding, the clock, the public operations) and the registration (`policy::register!`: one line per policy, generating [`Policy`], [`REGISTRY`] and the `Order` dispatch) |
//! | [`book`] | what every policy shares: the requests (slots, ids, arrival `seq`) and the clients (weight, service, waiting and running counts) |
//! | [`policy`] | the seam: the admission loop written once ([`policy::admit_pass`]), the [`policy::AdmissionOrder`] trait every policy implements (its order: next candidate, skip or stop, charges), [`PolicySpec`] (what a policy registers) and the `register!` macro |
//! | [`prefix`] | prefix matching and parking against a [`RadixTree`], and the longest-match order (LPM and DLPM) |
//! | [`fcfs`], [`lpm`], [`vtc`], [`dlpm`], [`las`] | one module per policy: its [`PolicySpec`], its order, its counters |
//! | [`least`] | the order VTC and LAS share: the waiting client with the least per-client value first |
//! | [`preble`] | Preble's multi-level priority wait queue, the order LPM walks under [`LpmRule::PREBLE`] |
//! | [`state`] | saving and restoring the fairness state (`state` / `load_state`) |
//!
//! The policies in one line each (details in their modules and
//! ALGORITHMS.md §5, §5b, §6):
//!
//! * **FCFS**: arrival order; stops at the first request that does not fit.
//! * **LPM**: longest cached prefix first; skips what does not fit.
//! * **VTC**: least-served client first, by a per-client virtual counter.
//! * **DLPM**: LPM order gated by per-client deficits refilled by a quantum.
//! * **LAS**: least attained service first, token-weighted, decaying with a
//!   half-life on the scheduler's clock ([`LocalScheduler::set_time`]).
//! * **Preble's queue** (an LPM rule): ten levels by cache-hit ratio, served
//!   one level per step, round-robin from the top, `(level + 1) * 10`
//!   requests at most, arrival order within a level.
//!
//! **Oversize requests** (one rule for every policy, applied here, in
//! [`LocalScheduler::schedule_step`], around the policy's own walk): a
//! scheduling call that admits nothing, with `max_requests >= 1` and a
//! request waiting, is repeated once with `max_requests = 1` and
//! `oversize_budget` (default: unlimited) in place of `token_budget`; what
//! that admits is the call's only admission. It is the request the policy
//! would admit next with that room, and it is larger than the call's whole
//! `token_budget` (had it fitted, the first pass would have admitted it or
//! something else), so it could never fit a step of that budget: it is
//! admitted alone and the engine prefills it in chunks, as engines with
//! chunked prefill do. A request that only misses what is left after others
//! were admitted in the same call keeps waiting. Charges are the policy's
//! usual ones (VTC: `w_in * input_len / w` on its counter; DLPM: `w_e *
//! extend_len / w` on its deficit, after a refill if no waiting client has
//! credit, exactly as a call with that room would make it).
//!
//! With the default room, every `schedule` call with a request waiting and
//! `max_requests >= 1` admits at least one (`schedule_within_credit` too,
//! except where only a DLPM refill would let one go), so no waiting request
//! is blocked forever by another: once arrivals stop, each waiting request
//! is admitted within as many calls as requests wait
//! (`proptests::no_waiting_request_is_blocked_forever`). A caller whose
//! `token_budget` is only what is *left* of a step another prefill is using
//! turns the rule off for that call (`oversize_budget = Some(0)`), or caps
//! it (`Some(free KV cache)`); an engine that cannot prefill in chunks
//! rejects such prompts at `add` instead
//! ([`LocalScheduler::set_max_prompt_tokens`]).
//!
//! Errors leave the scheduler unchanged: every operation validates first,
//! then mutates.

mod book;
mod dlpm;
mod fcfs;
mod las;
mod least;
mod lpm;
mod policy;
mod preble;
mod prefix;
mod state;
mod vtc;

#[cfg(test)]
mod tests;

use crate::error::{check_positive, Error, Result};
use crate::ordf64::OrdF64;
use crate::radix::{Namespace, RadixTree};

pub use crate::request_id::RequestId;
pub use lpm::LpmRule;
pub use state::{FORMAT as STATE_FORMAT, VERSION as STATE_VERSION};

use book::{Book, Req, Slot};
use policy::{admit_pass, AdmissionOrder, Registered, Room, Unfit};
pub use policy::{OptionSpec, PolicySpec, StateField};
use prefix::PrefixIndex;
use state::SavedClient;

/// The slot / node index meaning "none".
const NIL: u32 = u32::MAX;

/// Client-table size below which idle clients are never swept.
const FORGET_MIN: usize = 1024;

/// Idle clients that still carry debt kept at most (see
/// [`LocalScheduler::forget_idle_clients`]): beyond it, the ones with the
/// least debt are forgotten first.
pub const MAX_IDLE_DEBTORS: usize = 65_536;

// The registration: one line per policy, `Variant { options } => its order
// type` (the module owns the rest: its `PolicySpec` in `Registered`).
policy::register! {
    Fcfs => fcfs::Fcfs,
    Lpm => lpm::Lpm,
    Vtc { w_in, w_out } => vtc::Vtc,
    Dlpm { quantum, w_e, w_q, quantum_scale, strict_credit } => dlpm::Dlpm,
    Las { half_life_s, w_in, w_out } => las::Las,
}

impl Policy {
    /// Whether the policy orders by prefix match, so needs a [`RadixTree`].
    fn needs_tree(&self) -> bool {
        self.spec().needs_tree
    }
    /// (input/extend weight, output weight) used for `service`.
    fn service_weights(&self) -> (f64, f64) {
        let values = self.option_values();
        self.spec()
            .service_weights
            .map_or((1.0, 2.0), |(i, o)| (values[i], values[o]))
    }
    /// Every option must be positive and finite (or 0 where 0 is off).
    fn validate(&self) -> Result<()> {
        for (opt, &v) in self.spec().options.iter().zip(&self.option_values()) {
            opt.check(v)?;
        }
        Ok(())
    }
}

/// One admitted request.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission<T> {
    pub id: RequestId,
    pub client: String,
    pub item: T,
    pub input_len: usize,
    pub cached_len: usize,
    pub extend_len: usize,
}

/// A local scheduler for one worker (see the module docs).
#[derive(Debug)]
pub struct LocalScheduler<T> {
    policy: Policy,
    book: Book<T>,
    order: Order,
    /// The tree this scheduler is bound to (the first one passed).
    tree_id: Option<u64>,
    /// Live clients above which the next finish / remove sweeps idle ones.
    forget_at: usize,
    /// `add` rejects prompts longer than this (see
    /// [`Self::set_max_prompt_tokens`]).
    max_prompt_tokens: Option<usize>,
    /// LPM's walk (see [`Self::set_lpm_rule`]).
    lpm_rule: LpmRule,
    /// The time set by [`Self::set_time`] (`None`: the wall clock).
    clock: Option<f64>,
}

impl<T> LocalScheduler<T> {
    /// Validate weights and build an empty scheduler.
    pub fn new(policy: Policy) -> Result<Self> {
        policy.validate()?;
        Ok(LocalScheduler {
            policy,
            book: Book::new(policy.service_weights()),
            order: Order::new(policy, LpmRule::default()),
            tree_id: None,
            forget_at: FORGET_MIN,
            max_prompt_tokens: None,
            lpm_rule: LpmRule::default(),
            clock: None,
        })
    }

    /// How an LPM scheduler walks its order ([`LpmRule`]: the paper's
    /// idealised walk by default, [`LpmRule::SGLANG`] as SGLang runs it).
    /// An engine setting, not fairness state: `state` / `load_state` neither
    /// save nor change it. Errors (nothing changes): the policy is not LPM,
    /// or requests are waiting (set it before the first `add`).
    pub fn set_lpm_rule(&mut self, rule: LpmRule) -> Result<()> {
        if self.policy != Policy::Lpm {
            return Err(Error::value(format!(
                "stop_at_unfit / fcfs_above apply to LPM only, not {:?}",
                self.policy
            )));
        }
        if rule.multi_priority && (rule.stop_at_unfit || rule.fcfs_above.is_some()) {
            return Err(Error::value(
                "multi_priority (Preble's queue) excludes stop_at_unfit and fcfs_above".to_string(),
            ));
        }
        if self.book.waiting > 0 {
            return Err(Error::value(format!(
                "the LPM rule is set before requests wait ({} waiting)",
                self.book.waiting
            )));
        }
        self.lpm_rule = rule;
        self.order = Order::new(self.policy, rule);
        Ok(())
    }
    pub fn lpm_rule(&self) -> LpmRule {
        self.lpm_rule
    }

    /// Reject at [`Self::add`] every prompt of more than `limit` tokens
    /// (`None`, the default: accept any length). For an engine that cannot
    /// prefill in chunks, with `limit` its step's token budget: a longer
    /// prompt could never run there, so it is refused with an error naming
    /// the request and the limit instead of waiting (the oversize rule of
    /// the module docs would admit it alone). Only `add` checks it (a
    /// `requeue` brings back a request that was already admitted). An engine
    /// setting, not fairness state: `state` / `load_state` neither save nor
    /// change it.
    pub fn set_max_prompt_tokens(&mut self, limit: Option<usize>) {
        self.max_prompt_tokens = limit;
    }
    pub fn max_prompt_tokens(&self) -> Option<usize> {
        self.max_prompt_tokens
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The scheduler's time, in seconds: the last [`Self::set_time`], or,
    /// until one is made, the wall clock (seconds since the UNIX epoch).
    /// Policies whose charges depend on time (LAS's decay) read it before
    /// every operation that charges; the others ignore it.
    pub fn now(&self) -> f64 {
        self.clock.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        })
    }

    /// Run on injected time from now on (a simulator's clock, a test's):
    /// the scheduler's time is `now` seconds until the next call. `now` must
    /// be finite and not before the last time set (`Value` error naming
    /// `now`; nothing changes). An engine that never calls it runs on the
    /// wall clock.
    pub fn set_time(&mut self, now: f64) -> Result<()> {
        if !now.is_finite() {
            return Err(Error::value(format!(
                "now must be a finite number, got {now}"
            )));
        }
        if let Some(last) = self.clock.filter(|&last| now < last) {
            return Err(Error::value(format!(
                "now = {now} goes back from the time last set ({last})"
            )));
        }
        self.clock = Some(now);
        self.order.set_time(now);
        Ok(())
    }

    /// Bring the policy to the scheduler's time (before an operation that
    /// may charge).
    fn tick(&mut self) {
        let now = self.now();
        self.order.set_time(now);
    }
    /// Waiting requests.
    pub fn len(&self) -> usize {
        self.book.waiting
    }
    pub fn is_empty(&self) -> bool {
        self.book.waiting == 0
    }
    pub fn num_running(&self) -> usize {
        self.book.running
    }
    /// DLPM: virtual refills so far (0 for the other policies).
    pub fn refills(&self) -> u64 {
        self.order.refills()
    }
    /// DLPM: `(the quantum a refill would use now, the largest quantum a
    /// refill has used so far)` (fixed or automatic, `crate::quantum`;
    /// the second is 0 before the first refill); `None` for the other
    /// policies.
    pub fn quantum(&self) -> Option<(f64, f64)> {
        self.order.quantum_now()
    }
    /// Re-matches done so far because the tree changed (diagnostics).
    pub fn rematches(&self) -> u64 {
        self.order.prefix().map_or(0, |p| p.rematches())
    }

    /// The client's index, creating it (weight 1) if unknown.
    fn client_or_create(&mut self, name: &str) -> u32 {
        let (c, slot) = self.book.client_or_create(name);
        match slot {
            Slot::Existing => {}
            Slot::New => self.order.add_client(),
            Slot::Reused => self.order.reuse_client(c),
        }
        c
    }

    /// Forget idle clients once the client table has doubled since the last
    /// sweep (amortized O(1) per operation; see [`Self::forget_idle_clients`]).
    fn maybe_forget(&mut self) {
        if self.book.live_clients() > self.forget_at {
            self.forget_idle_clients();
        }
    }

    /// Forget every idle client the policy says carries nothing: no waiting
    /// or running request, the default weight, and (VTC) a counter at or
    /// below the lift floor or (DLPM) its debt paid (`q > 0`). Such a client
    /// coming back is treated as new, which gives it no more than it would
    /// have had (VTC lifts it to the floor anyway; DLPM's new client starts
    /// at 0, at most one quantum below its old credit), so fairness between
    /// backlogged clients is unchanged. What is lost is its history:
    /// `service(client)` restarts at 0 (export metrics first).
    ///
    /// Idle clients that do carry debt are kept, up to [`MAX_IDLE_DEBTORS`];
    /// beyond it the ones with the least debt (VTC: the smallest counter;
    /// DLPM: the smallest `-q`) are forgotten first, and each of those is
    /// forgiven that debt if it returns. This cap is what bounds memory when
    /// nobody waits for long (VTC's floor is defined only while some client
    /// waits, so a stream of one-shot tenants served one at a time would
    /// otherwise all stay debtors).
    ///
    /// Runs by itself when the client table doubles (from 1,024), so a
    /// stream of tenants that come and go keeps memory bounded: at most
    /// about twice the clients holding requests plus [`MAX_IDLE_DEBTORS`].
    /// Returns how many were forgotten.
    pub fn forget_idle_clients(&mut self) -> usize {
        self.tick();
        let mut n = 0;
        let mut debtors = Vec::new();
        for c in 0..self.book.clients.len() as u32 {
            if self.book.is_idle(c) {
                if self.order.can_forget(&self.book, c) {
                    self.book.forget_client(c);
                    n += 1;
                } else {
                    debtors.push((OrdF64::new(self.order.debt(c)), c));
                }
            }
        }
        if debtors.len() > MAX_IDLE_DEBTORS {
            let excess = debtors.len() - MAX_IDLE_DEBTORS;
            debtors.select_nth_unstable(excess - 1);
            for &(_, c) in &debtors[..excess] {
                self.book.forget_client(c);
                n += 1;
            }
        }
        self.forget_at = FORGET_MIN.max(2 * self.book.live_clients());
        n
    }

    /// Clients known now (forgotten ones excluded).
    pub fn num_clients(&self) -> usize {
        self.book.live_clients()
    }

    /// Bind to `tree` on first use; refuse any other tree afterwards.
    fn check_tree(&mut self, tree: &RadixTree) -> Result<()> {
        match self.tree_id {
            None => {
                self.tree_id = Some(tree.id());
                Ok(())
            }
            Some(id) if id == tree.id() => Ok(()),
            Some(_) => Err(Error::value(
                "this scheduler is bound to a different RadixTree (pass the same tree every time)",
            )),
        }
    }

    /// What `add` and `requeue` check of a request about to wait: its length
    /// fits the slot index, and a tree is given when the policy needs one.
    fn check_waiting_input(&self, tokens: &[u32], has_tree: bool) -> Result<()> {
        if tokens.is_empty() {
            return Err(Error::value(
                "tokens: the prompt is empty (a request needs at least one prompt token)",
            ));
        }
        if tokens.len() >= u32::MAX as usize {
            return Err(Error::value(format!(
                "tokens: {} tokens is too long (max {})",
                tokens.len(),
                u32::MAX - 1
            )));
        }
        if self.policy.needs_tree() && !has_tree {
            return Err(Error::value("this policy needs a RadixTree"));
        }
        Ok(())
    }

    /// Check the tree and bring the prefix matches up to date with it.
    fn sync(&mut self, tree: &RadixTree) -> Result<()> {
        self.check_tree(tree)?;
        if let Some(prefix) = self.order.prefix_mut() {
            prefix.sync(&self.book, tree);
        }
        Ok(())
    }

    // ----- public operations --------------------------------------------------

    /// Add a waiting request. `tree` is required for LPM/DLPM and optional
    /// otherwise (used only to report `cached_len`). An empty prompt is a
    /// `Value` error (as in [`Self::requeue`]; nothing changes). With
    /// [`Self::set_max_prompt_tokens`] set, a longer prompt is a `Value`
    /// error naming the request and the limit (nothing changes).
    pub fn add(
        &mut self,
        tree: Option<&mut RadixTree>,
        id: RequestId,
        client: &str,
        tokens: Vec<u32>,
        item: T,
        ns: Namespace,
    ) -> Result<()> {
        if self.book.slot_of(&id).is_some() {
            return Err(Error::value(format!(
                "request_id {id} is already waiting or running in this scheduler"
            )));
        }
        self.check_waiting_input(&tokens, tree.is_some())?;
        if let Some(limit) = self.max_prompt_tokens {
            if tokens.len() > limit {
                return Err(Error::value(format!(
                    "request_id {id} has {} prompt tokens, more than max_prompt_tokens = {limit} \
                     (the step's token budget): it could never be scheduled without chunked prefill",
                    tokens.len()
                )));
            }
        }
        let mut root = NIL;
        let tree: Option<&RadixTree> = match tree {
            Some(t) => {
                self.sync(t)?;
                root = t.root_or_create(&ns);
                Some(&*t)
            }
            None => None,
        };
        self.tick();
        let client = self.client_or_create(client);
        let r = self
            .book
            .insert(Req::waiting(id, client, tokens, root, item));
        self.order.enqueue(&self.book, tree, r);
        self.book.count_waiting(r);
        Ok(())
    }

    /// Remove a waiting request and return its item.
    pub fn remove(&mut self, id: &RequestId) -> Result<T> {
        let r = self
            .book
            .slot_of(id)
            .ok_or_else(|| Error::key(format!("request_id {id} is not waiting")))?;
        if self.book.req(r).running {
            return Err(Error::key(format!(
                "request_id {id} is running, not waiting (use finish)"
            )));
        }
        self.order.dequeue(&self.book, r);
        self.book.uncount_waiting(r);
        let req = self.book.release(r);
        self.maybe_forget();
        Ok(req.item.expect("waiting request has its item"))
    }

    /// Admit waiting requests in policy order under `token_budget` extend
    /// tokens and at most `max_requests` requests, with the oversize rule of
    /// the module docs at its default (unlimited room): when nothing fits
    /// and a slot is free, the policy's next request is admitted alone.
    /// [`Self::schedule_step`] with `oversize_budget = None, refill = true`.
    pub fn schedule(
        &mut self,
        tree: Option<&RadixTree>,
        token_budget: usize,
        max_requests: Option<usize>,
    ) -> Result<Vec<Admission<T>>> {
        self.schedule_step(tree, token_budget, max_requests, None, true)
    }

    /// [`Self::schedule`] without refilling: admits exactly what `schedule`
    /// would admit (same order, same charges, the same oversize rule) up to
    /// the point where it would refill (DLPM: every waiting client out of
    /// credit), and stops there, so `refills()` never moves. FCFS, LPM and
    /// VTC never refill: the same as `schedule`.
    /// [`Self::schedule_step`] with `oversize_budget = None, refill = false`.
    ///
    /// For a caller that admits a batch and may hand some of it back
    /// ([`Self::requeue`] with `refund = true` undoes each admission
    /// exactly): no refill happens on behalf of requests it then does not
    /// take. With no refill needed, one call with `max_requests = k` equals
    /// `k` calls with `max_requests = 1` (of either operation), the calls
    /// after the first one given the budget left and `oversize_budget =
    /// Some(0)` (what is left is not a whole step), and none made after a
    /// request admitted alone.
    pub fn schedule_within_credit(
        &mut self,
        tree: Option<&RadixTree>,
        token_budget: usize,
        max_requests: Option<usize>,
    ) -> Result<Vec<Admission<T>>> {
        self.schedule_step(tree, token_budget, max_requests, None, false)
    }

    /// The one scheduling path of every policy. The policy admits in its
    /// order under `token_budget` extend tokens and at most `max_requests`
    /// (`None`: no limit) requests; `refill = false` stops where DLPM would
    /// refill ([`Self::schedule_within_credit`]).
    ///
    /// The oversize rule: if that admits nothing, `max_requests` is at least
    /// 1 and `oversize_budget` (`None`: unlimited) exceeds `token_budget`,
    /// the policy admits once more with `max_requests = 1` under
    /// `oversize_budget` tokens, and that request is the call's only
    /// admission. Its extend tokens exceed `token_budget` (else the first
    /// pass would have admitted something), so it is a request that can
    /// never fit a step of `token_budget`, admitted alone for the engine to
    /// prefill in chunks; `oversize_budget` caps its size (e.g. the free KV
    /// cache). `oversize_budget <= token_budget` (`Some(0)`) turns the rule
    /// off: for a caller whose `token_budget` is only what is left of a step
    /// another prefill is using, where a request larger than that may still
    /// fit a later step whole.
    pub fn schedule_step(
        &mut self,
        tree: Option<&RadixTree>,
        token_budget: usize,
        max_requests: Option<usize>,
        oversize_budget: Option<usize>,
        refill: bool,
    ) -> Result<Vec<Admission<T>>> {
        if self.policy.needs_tree() && tree.is_none() {
            return Err(Error::value("this policy needs a RadixTree"));
        }
        if let Some(t) = tree {
            self.sync(t)?;
        }
        self.tick();
        let max_requests = max_requests.unwrap_or(usize::MAX);
        let room = oversize_budget.unwrap_or(usize::MAX);
        let (book, order) = (&mut self.book, &mut self.order);
        let admitted = admit_pass(order, book, tree, token_budget, max_requests, refill);
        if admitted.is_empty() && max_requests > 0 && room > token_budget && book.waiting > 0 {
            return Ok(admit_pass(order, book, tree, room, 1, refill));
        }
        Ok(admitted)
    }

    /// The slot and client of a running request (`Key` error otherwise).
    fn running_client(&self, id: &RequestId) -> Result<(u32, u32)> {
        match self.book.slot_of(id) {
            Some(r) if self.book.req(r).running => Ok((r, self.book.req(r).client)),
            Some(_) => Err(Error::key(format!(
                "request_id {id} is waiting, not running"
            ))),
            None => Err(Error::key(format!("request_id {id} is not running"))),
        }
    }

    /// Charge `n_tokens` decode tokens of a running request.
    pub fn charge_output(&mut self, id: &RequestId, n_tokens: usize) -> Result<()> {
        let (_, c) = self.running_client(id)?;
        self.tick();
        let n = n_tokens as f64;
        let (_, output_weight) = self.book.service_weights;
        self.book.clients[c as usize].service += output_weight * n;
        self.order.charge_output(&self.book, c, n);
        Ok(())
    }

    /// Replace the extend tokens charged at a running request's admission by
    /// `extend_len` (e.g. once the engine knows its real prefix match) and
    /// return the value charged before. Everything admission charged for
    /// extend tokens moves by the difference: `service(client)` by
    /// `w_e * delta` (VTC: `w_in`; FCFS/LPM: 1) and, under DLPM, the deficit
    /// by `-w_e * delta / w_c` with the weight `w_c` the client had at
    /// admission, so the request ends up charged exactly as if it had been
    /// admitted with `extend_len`. VTC's counter is unchanged: it charges
    /// `w_in * input_len / w_c` whatever the cache holds (ALGORITHMS.md §5).
    /// May be called again (each call replaces the previous value).
    ///
    /// Errors (nothing changes): unknown or waiting id -> `Key`;
    /// `extend_len > input_len` -> `Value`.
    pub fn recharge_extend(&mut self, id: &RequestId, extend_len: usize) -> Result<usize> {
        let (r, c) = self.running_client(id)?;
        let (old, input_len, admission_weight) = {
            let q = self.book.req(r);
            (q.charged_extend, q.input_len, q.admission_weight)
        };
        if extend_len > input_len {
            return Err(Error::value(format!(
                "extend_len = {extend_len} exceeds the input_len ({input_len}) of request_id {id}"
            )));
        }
        if extend_len == old {
            return Ok(old);
        }
        self.tick();
        let (input_weight, _) = self.book.service_weights;
        let delta = extend_len as f64 - old as f64;
        self.book.clients[c as usize].service += input_weight * delta;
        self.order
            .recharge_extend(&self.book, c, old, extend_len, admission_weight);
        self.book.req_mut(r).charged_extend = extend_len;
        Ok(old)
    }

    /// A running request goes back to waiting: the engine admitted it and
    /// then did not run it after all. It keeps its client and its arrival
    /// number (its place in every order) and waits with `tokens` (the
    /// sequence to prefix-match now, e.g. prompt and output so far after a
    /// preemption) and `item`.
    ///
    /// * `refund = true`: the engine never ran it (it skipped the request in
    ///   the step that admitted it). Everything its admission charged is
    ///   taken back (service, VTC's counter, DLPM's deficit), as if it had
    ///   never been admitted.
    /// * `refund = false`: the engine ran it and then preempted it. Its
    ///   charges stand and its next admission charges nothing, so
    ///   recomputing what it had computed costs its client nothing
    ///   (ALGORITHMS.md section 9); what it computes beyond that is charged
    ///   with [`Self::recharge_extend`] (the total extend tokens it has
    ///   really computed for the first time) and [`Self::charge_output`].
    ///
    /// Its client is not lifted (VTC): it never left the system.
    ///
    /// Errors (nothing changes): not running -> `Key`; too many tokens or a
    /// policy needing a tree without one -> `Value`.
    pub fn requeue(
        &mut self,
        tree: Option<&mut RadixTree>,
        id: &RequestId,
        tokens: Vec<u32>,
        item: T,
        refund: bool,
    ) -> Result<()> {
        let (r, c) = self.running_client(id)?;
        self.check_waiting_input(&tokens, tree.is_some())?;
        let tree: Option<&RadixTree> = match tree {
            Some(t) => {
                self.sync(t)?;
                if self.book.req(r).root == NIL {
                    // restored from a state_dict (which keeps no namespace)
                    self.book.req_mut(r).root = t.root_or_create(&Namespace::Default);
                }
                Some(&*t)
            }
            None => None,
        };
        if refund {
            self.recharge_extend(id, 0)?;
            let (input_len, weight) = {
                let q = self.book.req(r);
                (q.input_len, q.admission_weight)
            };
            self.order.refund_input(&self.book, c, input_len, weight);
            self.book.clients[c as usize].admitted -= 1;
        }
        self.book.unadmit(r, tokens, item, !refund);
        self.order.keep_place(&self.book, c);
        self.order.enqueue(&self.book, tree, r);
        self.book.count_waiting(r);
        Ok(())
    }

    /// Extend tokens currently charged for a running request (`Key` error if
    /// it is not running).
    pub fn charged_extend(&self, id: &RequestId) -> Result<usize> {
        let (r, _) = self.running_client(id)?;
        Ok(self.book.req(r).charged_extend)
    }

    /// A running request is done.
    pub fn finish(&mut self, id: &RequestId) -> Result<()> {
        let (r, _) = self.running_client(id)?;
        self.book.finish(r);
        self.maybe_forget();
        Ok(())
    }

    /// Raw service received: input weight x extend + output weight x output tokens.
    pub fn service(&self, client: &str) -> f64 {
        self.book.client(client).map_or(0.0, |c| c.service)
    }
    /// The policy's per-client number ([`PolicySpec::state_field`]: VTC's
    /// counter, DLPM's deficit, LAS's attained service) now (0 for unknown
    /// clients and policies without one).
    pub fn state_value(&self, client: &str) -> f64 {
        self.book
            .client_index(client)
            .map_or(0.0, |c| self.order.state_value(c, self.now()))
    }
    /// How far `client` is over its fair share by the policy's own account,
    /// in the policy's unit (weighted tokens; larger = further over; only
    /// compared between clients of one scheduler): its state field signed by
    /// [`StateField::lead_sign`] (VTC's counter, LAS's attained service,
    /// minus DLPM's deficit), or for a policy without one (FCFS, LPM) the
    /// service divided by the client's weight. 0 for an unknown client.
    /// The one number admission control ranks tenants by
    /// (`fairq.ledger.caps`).
    pub fn share_lead(&self, client: &str) -> f64 {
        if self.book.client_index(client).is_none() {
            return 0.0;
        }
        match self.policy.spec().state_field {
            Some(f) => f.lead_sign * self.state_value(client),
            None => self.service(client) / self.weight(client),
        }
    }
    /// `state_value` if the policy's state field is `field`, else 0.
    fn field_value(&self, field: &str, client: &str) -> f64 {
        match self.policy.spec().state_field {
            Some(f) if f.name == field => self.state_value(client),
            _ => 0.0,
        }
    }
    /// VTC counter (0 for unknown clients and the other policies).
    pub fn counter(&self, client: &str) -> f64 {
        self.field_value("counter", client)
    }
    /// DLPM deficit (0 for unknown clients and the other policies).
    pub fn deficit(&self, client: &str) -> f64 {
        self.field_value("deficit", client)
    }
    pub fn weight(&self, client: &str) -> f64 {
        self.book.client(client).map_or(1.0, |c| c.weight)
    }
    /// Set a client's weight (> 0, finite); creates the client if unknown.
    pub fn set_weight(&mut self, client: &str, w: f64) -> Result<()> {
        check_positive("weight", w)?;
        let c = self.client_or_create(client);
        self.book.clients[c as usize].weight = w;
        Ok(())
    }
    /// Clients in first-seen order.
    pub fn clients(&self) -> Vec<String> {
        self.book
            .clients
            .iter()
            .filter(|c| c.live)
            .map(|c| c.name.clone())
            .collect()
    }
    /// Waiting requests of a client.
    pub fn waiting_of(&self, client: &str) -> usize {
        self.book.client(client).map_or(0, |c| c.waiting)
    }
    /// Running requests of a client.
    pub fn running_of(&self, client: &str) -> usize {
        self.book.client(client).map_or(0, |c| c.running)
    }
    /// Current match length recorded for a waiting request (LPM/DLPM; 0 for
    /// FCFS/VTC, which match at admission only).
    pub fn cached_len(&self, id: &RequestId) -> Option<usize> {
        let r = self.book.slot_of(id)?;
        if self.book.req(r).running {
            return None;
        }
        Some(self.order.prefix().map_or(0, |p| p.match_len(r)))
    }

    /// Check internal invariants (tests): counts agree, recorded matches
    /// equal fresh ones, the policy's own bookkeeping is consistent.
    pub fn check_invariants(&self, tree: Option<&RadixTree>) {
        self.book.check_invariants();
        self.order.check_invariants(&self.book, tree);
    }
}
