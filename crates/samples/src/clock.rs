//! The sample agents' clock: the real one, or a manual one that a test moves on, so that a test
//! decides when a job moves on instead of waiting for it to.
//!
//! Every job state is computed from [`Clock::now`], and every pause an agent takes as work
//! (a synchronous answer, a chunk of a stream) is a [`Clock::sleep`]. A manual clock stands
//! still until [`Clock::advance`]: a job made on it stays in its first state, and a synchronous
//! answer stays unsent, until the test moves the clock past them. The proxy's own timers are not
//! on this clock; what the tests check of those still takes real time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The time the sample agents see. `Clock::default()` is the real clock.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    /// `None`: the real clock.
    manual: Option<Arc<Manual>>,
}

#[derive(Debug)]
struct Manual {
    /// The real instant the clock was made at: its time is this plus how far it was moved.
    start: Instant,
    /// How far the clock has been moved; sleepers wait on it.
    moved: watch::Sender<Duration>,
}

impl Clock {
    /// A clock that stands still, at the moment it is made, until it is moved.
    pub fn manual() -> Clock {
        Clock {
            manual: Some(Arc::new(Manual {
                start: Instant::now(),
                moved: watch::Sender::new(Duration::ZERO),
            })),
        }
    }

    /// The time now.
    pub fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some(m) => m.start + *m.moved.borrow(),
        }
    }

    /// Moves a manual clock on by `by`, waking whatever sleeps until then. The real clock goes
    /// at its own pace: this does nothing to it.
    pub fn advance(&self, by: Duration) {
        if let Some(m) = &self.manual {
            m.moved.send_modify(|moved| *moved += by);
        }
    }

    /// Waits until this clock has gone on by `d`.
    pub async fn sleep(&self, d: Duration) {
        let Some(m) = &self.manual else {
            return tokio::time::sleep(d).await;
        };
        let mut moved = m.moved.subscribe();
        let until = *moved.borrow() + d;
        // The sender lives as long as `m`, which this borrow keeps: the wait ends only when the
        // clock gets there.
        let _ = moved.wait_for(|now| *now >= until).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `f` is still pending when polled once more.
    async fn pending<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
        let mut f = Some(f);
        std::future::poll_fn(|cx| {
            let f = f.as_mut().map(|f| f.as_mut().poll(cx).is_pending());
            std::task::Poll::Ready(f.unwrap_or(false))
        })
        .await
    }

    #[tokio::test]
    async fn a_manual_clock_stands_still_until_it_is_moved() {
        let clock = Clock::manual();
        let at = clock.now();
        assert_eq!(clock.now(), at, "no real time passes on it");
        let mut minute = std::pin::pin!(clock.sleep(Duration::from_secs(60)));
        assert!(pending(minute.as_mut()).await);
        clock.advance(Duration::from_secs(59));
        assert_eq!(clock.now(), at + Duration::from_secs(59));
        assert!(pending(minute.as_mut()).await, "a minute has not passed");
        clock.advance(Duration::from_secs(1));
        assert!(!pending(minute.as_mut()).await, "the clock got there");
    }

    #[tokio::test(start_paused = true)]
    async fn the_real_clock_sleeps_in_real_time_and_is_not_moved() {
        let clock = Clock::default();
        let at = tokio::time::Instant::now();
        clock.sleep(Duration::from_secs(5)).await;
        assert_eq!(at.elapsed(), Duration::from_secs(5));
        let before = Instant::now();
        clock.advance(Duration::from_secs(3600));
        assert!(clock.now() < before + Duration::from_secs(60));
    }
}
