//! A library's panic on damaged input, turned into an error. Some readers we depend on assert
//! on what a malformed file holds instead of returning an error (the parquet crate's column
//! decoders); the reader's call runs inside [`contained`], which catches such a panic on its own
//! thread and keeps the panic message off stderr, so a damaged file is an input error like any
//! other, never a crash.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// Whether this thread runs inside [`contained`]: its panics are reported as errors.
    static CONTAINED: Cell<bool> = const { Cell::new(false) };
}

/// Keeps the panic hook quiet for contained panics; every other panic reaches the hook that was
/// installed before (the default one prints it).
fn quiet_hook() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(Cell::get) {
                previous(info);
            }
        }));
    });
}

/// `read()`, or the message of its panic (`Err`). Only panics on this thread are contained: a
/// reader that spreads work over threads is called once per thread.
pub fn contained<T>(read: impl FnOnce() -> T) -> Result<T, String> {
    quiet_hook();
    let outer = CONTAINED.with(|c| c.replace(true));
    let outcome = catch_unwind(AssertUnwindSafe(read));
    CONTAINED.with(|c| c.set(outer));
    outcome.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "an unexpected value".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_becomes_its_message_and_outside_panics_still_panic() {
        assert_eq!(contained(|| 7), Ok(7));
        assert_eq!(
            contained(|| -> u8 { panic!("decoder for dict not set") }),
            Err("decoder for dict not set".to_string())
        );
        let n = 3;
        assert_eq!(
            contained(|| -> u8 { panic!("page {n} is short") }),
            Err("page 3 is short".to_string())
        );
        // Nested: the inner one is contained, the outer goes on.
        assert_eq!(
            contained(|| contained(|| -> u8 { panic!("inner") })),
            Ok(Err("inner".into()))
        );
        assert!(!CONTAINED.with(Cell::get));
        assert!(catch_unwind(|| -> u8 { panic!("outside") }).is_err());
    }
}
