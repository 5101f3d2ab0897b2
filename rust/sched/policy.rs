//! The seam between the facade and the policies: [`AdmissionOrder`], the
//! trait each policy implements, [`PolicySpec`], what each registers
//! ([`Registered`]), and [`register!`], which generates from one line per
//! policy the `Policy` enum, the registry and `Order`, the enum the facade
//! holds (static dispatch: one `match` per operation, here).
//!
//! A policy owns its waiting order and its per-client counters; the facade
//! owns the requests and the clients ([`Book`]) and calls the policy at each
//! step of a request's life: `enqueue` (added), `dequeue` (removed or
//! admitted), `charge_output`, `recharge_extend`.
//!
//! The admission loop is written once, [`admit_pass`]: a policy supplies
//! only its order (`begin_pass`, `next_candidate`, what to do with a
//! candidate that does not fit, `charge_admission`, `end_pass`).

use super::book::Book;
use super::lpm::LpmRule;
use super::prefix::PrefixIndex;
use super::state::SavedClient;
use super::{Admission, Order};
use crate::radix::RadixTree;

/// What a pass has left when it asks for its next candidate.
#[derive(Clone, Copy)]
pub(super) struct Room<'a> {
    /// The tree given to `schedule` (`Some` whenever the policy needs one).
    pub tree: Option<&'a RadixTree>,
    /// Extend tokens left of the budget.
    pub left: usize,
    /// `false`: return `None` where a refill would be needed (DLPM) instead
    /// of refilling; policies that never refill ignore it.
    pub refill: bool,
}

/// What the pass does with a candidate that does not fit what is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unfit {
    /// Skip it; the walk goes on (LPM, DLPM, Preble).
    Skip,
    /// End the pass (FCFS, VTC: no overtaking).
    Stop,
}

/// One scheduling pass, the admission loop of every policy: admit the
/// policy's candidates in its order while their extend tokens fit `budget`
/// (what does not fit is skipped or ends the pass, as the policy says), at
/// most `max_requests` (or the policy's cap) of them; each admission is
/// charged (`charge_admission`), leaves the order (`dequeue`) and is
/// admitted in the book. The oversize rule is the facade's
/// (`LocalScheduler::schedule_step` calls this a second time).
pub(super) fn admit_pass<T>(
    order: &mut Order,
    book: &mut Book<T>,
    tree: Option<&RadixTree>,
    budget: usize,
    max_requests: usize,
    refill: bool,
) -> Vec<Admission<T>> {
    let mut out = Vec::new();
    let mut left = budget;
    let cap = order.begin_pass(book, max_requests);
    while out.len() < cap {
        let room = Room { tree, left, refill };
        let Some((r, cached)) = order.next_candidate(book, room) else {
            break;
        };
        let extend = book.req(r).input_len - cached;
        if extend > left {
            match order.unfit(book, r) {
                Unfit::Stop => break,
                Unfit::Skip => continue,
            }
        }
        left -= extend;
        order.charge_admission(book, r, extend);
        order.dequeue(book, r);
        out.push(book.admit(r, cached));
    }
    order.end_pass(book, out.len());
    out
}

/// What a policy does; every method but `enqueue`, `dequeue` and
/// `next_candidate` has a default (do nothing; `unfit`: stop).
pub(super) trait AdmissionOrder {
    /// A client was created; its index is the number created before it.
    fn add_client(&mut self) {}

    /// Client slot `c`, forgotten, now holds a new client: reset its
    /// counters to a new client's.
    fn reuse_client(&mut self, _c: u32) {}

    /// Whether idle client `c` (no requests, default weight) may be
    /// forgotten without changing what it would get if it came back: the
    /// policy's counters say it carries no debt (see `LocalScheduler::forget_idle_clients`).
    fn can_forget<T>(&self, _book: &Book<T>, _c: u32) -> bool {
        true
    }

    /// How much idle client `c` would lose if forgotten although
    /// `can_forget` says no (the policy's unit; only compared between
    /// clients): which debtors the idle cap forgets first.
    fn debt(&self, _c: u32) -> f64 {
        0.0
    }

    /// Waiting request `r` joins the order. Runs before the book counts it
    /// as waiting. `tree` is `Some` whenever the policy needs one.
    fn enqueue<T>(&mut self, book: &Book<T>, tree: Option<&RadixTree>, r: u32);

    /// Waiting request `r` leaves the order (removed, or about to be
    /// admitted). Runs while the book still counts it as waiting.
    fn dequeue<T>(&mut self, book: &Book<T>, r: u32);

    /// A scheduling pass begins ([`admit_pass`]); returns the most requests
    /// it may admit (default: `max_requests`; Preble: its level's quota).
    fn begin_pass<T>(&mut self, _book: &Book<T>, max_requests: usize) -> usize {
        max_requests
    }

    /// The next waiting request the pass considers, with its cached prefix
    /// length now, given the `room` left; `None` ends the pass.
    fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)>;

    /// The candidate `r` does not fit what is left: skip it (the walk goes
    /// on) or stop the pass.
    fn unfit<T>(&mut self, _book: &Book<T>, _r: u32) -> Unfit {
        Unfit::Stop
    }

    /// Candidate `r` is about to be admitted with `extend` extend tokens
    /// (still waiting): charge the policy's counters.
    fn charge_admission<T>(&mut self, _book: &Book<T>, _r: u32, _extend: usize) {}

    /// The pass ended after admitting `admitted` requests.
    fn end_pass<T>(&mut self, _book: &Book<T>, _admitted: usize) {}

    /// Client `c` decoded `tokens` output tokens.
    fn charge_output<T>(&mut self, _book: &Book<T>, _c: u32, _tokens: f64) {}

    /// A running request of client `c` admitted with weight
    /// `admission_weight` is now charged `new` extend tokens instead of `old`.
    fn recharge_extend<T>(
        &mut self,
        _book: &Book<T>,
        _c: u32,
        _old: usize,
        _new: usize,
        _admission_weight: f64,
    ) {
    }

    /// A request of client `c` admitted with `input_len` input tokens and
    /// weight `admission_weight` goes back to waiting with its admission
    /// undone: take back what admission charged beyond the extend tokens
    /// (the facade has already recharged the extend charge to 0). VTC:
    /// `w_in * input_len / w`.
    fn refund_input<T>(
        &mut self,
        _book: &Book<T>,
        _c: u32,
        _input_len: usize,
        _admission_weight: f64,
    ) {
    }

    /// Client `c`'s next `enqueue` is a request it already had in the
    /// system (requeued): its waiting queue is not "returning" (no VTC lift).
    fn keep_place<T>(&mut self, _book: &Book<T>, _c: u32) {}

    /// A state restore: set each client's state value (VTC's counter, DLPM's
    /// deficit; `SavedClient::counter`) from `clients` (indices in order; every client already added) and
    /// the refill count. VTC also remembers which clients had requests
    /// waiting, so their first re-add is not lifted (see `state.rs`).
    fn load_counters(&mut self, _clients: &[SavedClient], _refills: u64) {}

    /// The policy's per-client number (its [`PolicySpec::state_field`]:
    /// VTC's counter, DLPM's deficit) of client `c` at time `now` (0 for a
    /// policy without one).
    fn state_value(&self, _c: u32, _now: f64) -> f64 {
        0.0
    }
    /// The scheduler's clock reads `now` (seconds; see
    /// `LocalScheduler::set_time`): called before every operation that may
    /// charge, for the policies whose charges depend on time.
    fn set_time(&mut self, _now: f64) {}
    /// DLPM's virtual refills so far (0 elsewhere).
    fn refills(&self) -> u64 {
        0
    }
    /// DLPM: (the quantum a refill would use now, the largest one a refill
    /// has used); `None` elsewhere.
    fn quantum_now(&self) -> Option<(f64, f64)> {
        None
    }
    /// DLPM with the automatic quantum: its memory `(cost, count)` for the
    /// saved state (`crate::quantum::Quantum::memory`).
    fn quantum_memory(&self) -> Option<(f64, f64)> {
        None
    }
    /// A state restore: the automatic quantum's memory.
    fn load_quantum_memory(&mut self, _cost: f64, _count: f64) {}

    /// The prefix index, for the policies that order by prefix match.
    fn prefix(&self) -> Option<&PrefixIndex> {
        None
    }
    fn prefix_mut(&mut self) -> Option<&mut PrefixIndex> {
        None
    }

    /// Assert the policy's bookkeeping agrees with the book (tests).
    fn check_invariants<T>(&self, _book: &Book<T>, _tree: Option<&RadixTree>) {}
}

/// One option of a policy (a constructor keyword, `> 0` and finite, or
/// `>= 0` where [`Self::zero_is_off`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptionSpec {
    pub name: &'static str,
    /// The value an engine integration uses when the user gives none.
    pub engine_default: f64,
    /// 0 is allowed and turns the option's feature off (DLPM's
    /// `quantum_scale`: a fixed quantum); a saved state without it reads 0
    /// (states written before the option existed).
    pub zero_is_off: bool,
    /// A switch: 0 or 1 ([`Self::flag`]).
    pub flag: bool,
}

impl OptionSpec {
    pub const fn new(name: &'static str, engine_default: f64) -> Self {
        OptionSpec {
            name,
            engine_default,
            zero_is_off: false,
            flag: false,
        }
    }
    /// The same option, with 0 allowed (off).
    pub const fn zero_is_off(self) -> Self {
        OptionSpec {
            zero_is_off: true,
            ..self
        }
    }
    /// The same option, a switch: 0 (off) or 1 (on), nothing else.
    pub const fn flag(self) -> Self {
        OptionSpec {
            zero_is_off: true,
            flag: true,
            ..self
        }
    }
    /// Check a value: finite and `> 0` (`>= 0` where 0 is off; 0 or 1 for
    /// a flag); the error names the option.
    pub fn check(&self, v: f64) -> crate::error::Result<f64> {
        if self.flag {
            if v == 0.0 || v == 1.0 {
                return Ok(v);
            }
            return Err(crate::error::Error::value(format!(
                "{} must be 0 or 1 (off or on), got {v}",
                self.name
            )));
        }
        if self.zero_is_off && (v == 0.0 || v.is_finite() && v > 0.0) {
            return Ok(v);
        }
        if self.zero_is_off {
            return Err(crate::error::Error::value(format!(
                "{} must be a finite number >= 0 (0: off), got {v}",
                self.name
            )));
        }
        crate::error::check_positive(self.name, v)
    }
}

/// The per-client number a policy keeps, as `state` reports it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateField {
    /// Its key in a client entry of the state (and the binding's method).
    pub name: &'static str,
    /// The least value a loaded state may hold (`None`: any finite number).
    pub min: Option<f64>,
    /// The Prometheus family (`fairq_<metric>`) and its help text.
    pub metric: &'static str,
    pub help: &'static str,
    /// `+1.0` if a larger value means the client was served more than its
    /// share (VTC's counter, LAS's attained service), `-1.0` if less (DLPM's
    /// deficit: credit left): the sign of [`super::LocalScheduler::share_lead`].
    pub lead_sign: f64,
}

/// What a policy module registers: everything the rest of fairq (the
/// facade, the state, the bindings, Python's tables) knows of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicySpec {
    /// Its name (`"vtc"`): the state's `policy`, Python's table key.
    pub name: &'static str,
    /// Its Python class in `fairq._core`.
    pub class_name: &'static str,
    /// Its options in constructor order (the fields of its [`super::Policy`]
    /// variant).
    pub options: &'static [OptionSpec],
    /// It orders by prefix match, so it needs a `RadixTree`.
    pub needs_tree: bool,
    /// It refills credit (DLPM): `schedule_within_credit` differs from
    /// `schedule`, and the state holds a `refills` count.
    pub refills: bool,
    /// A pass stops at the first candidate that does not fit (no
    /// overtaking) rather than skipping it.
    pub stop_at_unfit: bool,
    /// Its per-client number, if any.
    pub state_field: Option<StateField>,
    /// Indices in `options` of the (input, output) weights of `service`
    /// (`None`: 1 and 2).
    pub service_weights: Option<(usize, usize)>,
}

/// A policy module's order type: its [`PolicySpec`] and how it is built.
pub(super) trait Registered: AdmissionOrder + Sized {
    const SPEC: PolicySpec;
    /// The order for `options` (validated, in [`PolicySpec::options`]
    /// order) and LPM's rule (the others ignore it).
    fn build(options: &[f64], rule: LpmRule) -> Self;
}

/// The registration of every policy (`sched/mod.rs` invokes it once, one
/// line per policy: `Variant { options } => module::Order`). Generates the
/// public [`super::Policy`] enum (one variant per policy, its options as
/// fields), [`REGISTRY`](super::REGISTRY), and `Order`, the enum the facade
/// holds, which dispatches [`AdmissionOrder`] to the policy's type (static
/// dispatch, as `pydantic-core` does for its validators).
macro_rules! register {
    ($($variant:ident $({ $($opt:ident),* })? => $order:ty),* $(,)?) => {
        /// The admission policy and its options (the scheduler's
        /// configuration): one variant per registered policy.
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum Policy {
            $($variant $({ $($opt: f64),* })?),*
        }

        /// Every registered policy, in registration order.
        pub const REGISTRY: &[PolicySpec] = &[$(<$order as Registered>::SPEC),*];

        impl Policy {
            /// What the policy's module registered.
            pub fn spec(&self) -> &'static PolicySpec {
                match self {
                    $(Policy::$variant { .. } => &<$order as Registered>::SPEC),*
                }
            }
            /// Its option values, in [`PolicySpec::options`] order.
            pub fn option_values(&self) -> Vec<f64> {
                match *self {
                    $(Policy::$variant $({ $($opt),* })? => vec![$($($opt),*)?]),*
                }
            }
            /// The policy named `name` with `values` as its options (in
            /// [`PolicySpec::options`] order; not validated); `None` for an
            /// unknown name or too few values.
            #[allow(unused_mut, unused_variables)]
            pub fn from_options(name: &str, values: &[f64]) -> Option<Policy> {
                $(
                    if name == <$order as Registered>::SPEC.name {
                        let mut it = values.iter().copied();
                        return Some(Policy::$variant $({ $($opt: it.next()?),* })?);
                    }
                )*
                None
            }
        }

        /// The policy a scheduler runs, with its state.
        #[derive(Debug)]
        enum Order {
            $($variant($order)),*
        }

        impl Order {
            /// The order of `policy`; `lpm_rule` is LPM's (the others ignore it).
            fn new(policy: Policy, lpm_rule: LpmRule) -> Self {
                let values = policy.option_values();
                match policy {
                    $(Policy::$variant { .. } => Order::$variant(<$order as Registered>::build(&values, lpm_rule))),*
                }
            }
        }

        /// `each!(self, p => expr)`: `expr` with `p` bound to the policy.
        macro_rules! each {
            ($self_:expr, $p:ident => $e:expr) => {
                match $self_ {
                    $(Order::$variant($p) => $e),*
                }
            };
        }

        impl AdmissionOrder for Order {
            fn add_client(&mut self) {
                each!(self, p => p.add_client())
            }
            fn reuse_client(&mut self, c: u32) {
                each!(self, p => p.reuse_client(c))
            }
            fn can_forget<T>(&self, book: &Book<T>, c: u32) -> bool {
                each!(self, p => p.can_forget(book, c))
            }
            fn debt(&self, c: u32) -> f64 {
                each!(self, p => p.debt(c))
            }
            fn enqueue<T>(&mut self, book: &Book<T>, tree: Option<&RadixTree>, r: u32) {
                each!(self, p => p.enqueue(book, tree, r))
            }
            fn dequeue<T>(&mut self, book: &Book<T>, r: u32) {
                each!(self, p => p.dequeue(book, r))
            }
            fn begin_pass<T>(&mut self, book: &Book<T>, max_requests: usize) -> usize {
                each!(self, p => p.begin_pass(book, max_requests))
            }
            fn next_candidate<T>(&mut self, book: &Book<T>, room: Room<'_>) -> Option<(u32, usize)> {
                each!(self, p => p.next_candidate(book, room))
            }
            fn unfit<T>(&mut self, book: &Book<T>, r: u32) -> Unfit {
                each!(self, p => p.unfit(book, r))
            }
            fn charge_admission<T>(&mut self, book: &Book<T>, r: u32, extend: usize) {
                each!(self, p => p.charge_admission(book, r, extend))
            }
            fn end_pass<T>(&mut self, book: &Book<T>, admitted: usize) {
                each!(self, p => p.end_pass(book, admitted))
            }
            fn charge_output<T>(&mut self, book: &Book<T>, c: u32, tokens: f64) {
                each!(self, p => p.charge_output(book, c, tokens))
            }
            fn recharge_extend<T>(&mut self, book: &Book<T>, c: u32, old: usize, new: usize, w: f64) {
                each!(self, p => p.recharge_extend(book, c, old, new, w))
            }
            fn refund_input<T>(&mut self, book: &Book<T>, c: u32, input_len: usize, w: f64) {
                each!(self, p => p.refund_input(book, c, input_len, w))
            }
            fn keep_place<T>(&mut self, book: &Book<T>, c: u32) {
                each!(self, p => p.keep_place(book, c))
            }
            fn load_counters(&mut self, clients: &[SavedClient], refills: u64) {
                each!(self, p => p.load_counters(clients, refills))
            }
            fn state_value(&self, c: u32, now: f64) -> f64 {
                each!(self, p => p.state_value(c, now))
            }
            fn set_time(&mut self, now: f64) {
                each!(self, p => p.set_time(now))
            }
            fn refills(&self) -> u64 {
                each!(self, p => p.refills())
            }
            fn quantum_now(&self) -> Option<(f64, f64)> {
                each!(self, p => p.quantum_now())
            }
            fn quantum_memory(&self) -> Option<(f64, f64)> {
                each!(self, p => p.quantum_memory())
            }
            fn load_quantum_memory(&mut self, cost: f64, count: f64) {
                each!(self, p => p.load_quantum_memory(cost, count))
            }
            fn prefix(&self) -> Option<&PrefixIndex> {
                each!(self, p => p.prefix())
            }
            fn prefix_mut(&mut self) -> Option<&mut PrefixIndex> {
                each!(self, p => p.prefix_mut())
            }
            fn check_invariants<T>(&self, book: &Book<T>, tree: Option<&RadixTree>) {
                each!(self, p => p.check_invariants(book, tree))
            }
        }
    };
}
pub(super) use register;
