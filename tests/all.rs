//! The one integration-test binary: every test of the runner, as `suite::<part>::<test>`.
//!
//! One binary links the runner once (27 binaries of 110–190 MB each linked it 27 times) and
//! shares one `support` module, so a fixture is written once and an unused one is a warning.
//! `cargo test --test all -- suite::serve::` runs one part; CONTRIBUTING.md lists the rest.

// Tests state their expectations with unwrap/expect: a failed one names the line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
mod support;
