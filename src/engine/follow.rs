//! How closely a task is followed, and how refreshes of one task from its back are shared.
//!
//! Two pulls meet here. A client that waits for the result (a blocking A2A send, a chat
//! completion, a stream) wants to hear of the end at once: the back is polled often, at first
//! every [`FOLLOW_MIN`], then at a fortieth of the time waited so far (so what a wait adds stays
//! within ≈ 2.5 % of the job's own time: ≈ 50 ms on a 2 s job), never more rarely than the
//! route's `poll_max_interval`. And many clients polling one task must not each cost the agent a
//! call: refreshes of a task are made one at a time, and one made within the freshness the caller
//! asks for (a route's `min_refresh` for a client's poll, the follow interval for a waiting
//! client), or begun after the caller arrived, is taken from the store instead of asking the
//! agent again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// The shortest interval at which a waiting client's task is polled.
pub const FOLLOW_MIN: Duration = Duration::from_millis(50);

/// The interval between polls for a client that has waited `waited` so far.
pub fn follow_interval(waited: Duration, longest: Duration) -> Duration {
    (waited / 40).max(FOLLOW_MIN).min(longest.max(FOLLOW_MIN))
}

/// What one task's refreshes remember between them, behind the task's gate.
#[derive(Debug, Default, Clone, Copy)]
pub struct Gate {
    /// When the last refresh from the back began.
    pub last: Option<Instant>,
    /// Since when the agent has said it does not know the task (no answer since said otherwise).
    pub lost_since: Option<Instant>,
}

/// Per task, when it was last refreshed from its back; the lock makes refreshes of one task
/// happen one at a time. Entries of tasks nobody polls for a minute are dropped.
pub struct Refreshes {
    last: moka::sync::Cache<String, Arc<Mutex<Gate>>>,
}

impl Default for Refreshes {
    fn default() -> Self {
        Refreshes {
            last: moka::sync::Cache::builder()
                .max_capacity(1_000_000)
                .time_to_idle(Duration::from_secs(60))
                .build(),
        }
    }
}

impl Refreshes {
    /// The gate of one task: hold it while refreshing; it says when the last refresh began.
    pub fn gate(&self, task_id: &str) -> Arc<Mutex<Gate>> {
        self.last
            .get_with_by_ref(task_id, || Arc::new(Mutex::new(Gate::default())))
    }

    /// Forgets a task (it has ended: nobody will refresh it again).
    pub fn forget(&self, task_id: &str) {
        self.last.invalidate(task_id);
    }
}

/// Whether a refresh that began at `last` is recent enough for a caller that accepts `fresh`.
pub fn is_fresh(last: Option<Instant>, fresh: Duration) -> bool {
    last.is_some_and(|at| at.elapsed() < fresh)
}

/// Whether the last refresh began at or after `arrived`, when a caller asked: its answer is as
/// new as one the caller would get by asking itself.
pub fn began_since(last: Option<Instant>, arrived: Instant) -> bool {
    last.is_some_and(|at| at >= arrived)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_client_is_followed_closely_then_in_proportion() {
        let max = Duration::from_secs(10);
        assert_eq!(follow_interval(Duration::ZERO, max), FOLLOW_MIN);
        assert_eq!(follow_interval(Duration::from_secs(2), max), FOLLOW_MIN);
        assert_eq!(
            follow_interval(Duration::from_secs(4), max),
            Duration::from_millis(100)
        );
        assert_eq!(follow_interval(Duration::from_secs(3600), max), max);
        // A route whose longest interval is shorter than the floor still polls at the floor.
        assert_eq!(
            follow_interval(Duration::from_secs(60), Duration::from_millis(1)),
            FOLLOW_MIN
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refresh_is_fresh_for_as_long_as_the_caller_accepts() {
        let refreshes = Refreshes::default();
        let gate = refreshes.gate("t");
        assert!(!is_fresh(gate.lock().await.last, Duration::from_secs(1)));
        gate.lock().await.last = Some(Instant::now());
        tokio::time::advance(Duration::from_millis(200)).await;
        let same = refreshes.gate("t");
        assert!(is_fresh(same.lock().await.last, Duration::from_millis(250)));
        assert!(!is_fresh(
            same.lock().await.last,
            Duration::from_millis(100)
        ));
        refreshes.forget("t");
        assert!(!is_fresh(
            refreshes.gate("t").lock().await.last,
            Duration::from_secs(1)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refresh_begun_after_a_caller_arrived_is_as_new_as_its_own() {
        let arrived = Instant::now();
        assert!(!began_since(None, arrived));
        tokio::time::advance(Duration::from_millis(5)).await;
        assert!(began_since(Some(Instant::now()), arrived));
        assert!(began_since(Some(arrived), arrived));
        let before = arrived - Duration::from_millis(1);
        assert!(!began_since(Some(before), arrived));
    }
}
