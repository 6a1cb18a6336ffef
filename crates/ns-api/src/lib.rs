//! The engine's API for the front ends (CLI, Python, server): the serialisable call and its
//! requests, their reports, shards and their merge, batches of calls on one model, and patchset
//! grids. Everything a front end does beyond parsing its input and formatting the answer is here,
//! once; models are loaded through `ns_source`, numbers come from `ns_inference`.
//!
//! Like the engine below it, this crate never prints or exits.

pub mod call;
pub mod grid;
pub mod merge;
pub mod overview;
pub mod report;
pub mod request;
pub mod shard;
pub mod verbs;
