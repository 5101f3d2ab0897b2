//! fairq: fair, prefix-aware request scheduling for LLM serving.
//!
//! The crate is a pure-Rust core: every scheduling policy and data structure
//! lives here with no Python types. The optional `python` feature adds the
//! thin PyO3 binding layer in `python/`, which only translates arguments,
//! errors and Python objects; the policies never see Python.
//!
//! Module map (one concept per module, mirrored in `python/fairq/`):
//! - [`error`]: the error enum every fallible core operation returns.
//! - [`request_id`]: the one request-id type (int or str) of every API.
//! - [`ordf64`]: the one total-order float key for ordered containers.
//! - [`deficit`]: deficit refills in closed form, shared by DLPM and D2LPM.
//! - [`heap`]: indexed binary heap with stable handles (remove / re-key in O(log n)).
//! - [`hash`]: the fast non-cryptographic hasher for process-chosen integer keys.
//! - [`fifo`]: slab-backed FIFO with O(1) push/pop at both ends and O(1) removal.
//! - [`registry`]: identity registry (opaque object id -> queue entry).
//! - [`request_queue`]: vLLM-compatible FCFS and priority queues.
//! - [`drr`]: Deficit Round Robin across policy classes, configured by Dynamo's router policy files.
//! - [`wfq`]: Weighted Fair Queuing on per-flow virtual finish times.
//! - [`dualphase`]: the think / output dual-phase queue.
//! - [`radix`]: token radix tree modelling an engine's prefix cache.
//! - [`sched`]: local (per-worker) schedulers FCFS, LPM, VTC, DLPM.
//! - [`dispatch`]: D2LPM and the baseline dispatchers across workers.

pub mod deficit;
pub mod dispatch;
pub mod drr;
pub mod dualphase;
pub mod error;
pub mod fifo;
pub mod hash;
pub mod heap;
pub mod ordf64;
pub mod quantum;
pub mod radix;
pub mod registry;
pub mod request_id;
pub mod request_queue;
pub mod sched;
pub mod value;
pub mod wfq;

#[cfg(test)]
mod testutil;

#[cfg(test)]
mod proptests;

#[cfg(feature = "python")]
pub mod python;

pub use error::{Error, Result};
