//! Waiting on a condition, never on time alone: each wait here polls, and fails the test once its
//! deadline has passed.

#![allow(dead_code)]

use std::cell::RefCell;
use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::DEADLINE;

/// The longest a polled condition may take to hold: a task's whole life and its settlement, with
/// the other tests of the file running at once.
pub const POLL_DEADLINE: Duration = Duration::from_secs(3 * DEADLINE.as_secs());
/// How long [`eventually`] waits between two calls of its probe.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Polls `cond` until it holds; fails the test after [`DEADLINE`].
pub async fn wait_until(mut cond: impl FnMut() -> bool, what: &str) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Calls `probe` until it returns `Ok`, and returns what that holds; an `Err` is what the probe
/// saw instead. Fails the test, naming `what` and the last `Err`, after [`POLL_DEADLINE`].
pub async fn eventually<T, E, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    let started = Instant::now();
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) => assert!(
                started.elapsed() < POLL_DEADLINE,
                "timed out waiting for {what}: {last}"
            ),
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Calls `probe`, which answers a state and a body, until the state is one of `until`; every
/// state seen on the way (consecutive repeats collapsed) and the last body. Fails the test as
/// [`eventually`] does.
pub async fn states<F, Fut>(what: &str, until: &[&str], mut probe: F) -> (Vec<String>, Value)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (String, Value)>,
{
    let seen: RefCell<Vec<String>> = RefCell::default();
    let last = eventually(what, || {
        let (next, seen) = (probe(), &seen);
        async move {
            let (state, body) = next.await;
            let mut seen = seen.borrow_mut();
            if seen.last() != Some(&state) {
                seen.push(state.clone());
            }
            if until.contains(&state.as_str()) {
                Ok(body)
            } else {
                Err(format!("stuck after {seen:?}; last: {body}"))
            }
        }
    })
    .await;
    (seen.into_inner(), last)
}
