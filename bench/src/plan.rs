//! How long each part of a run takes, in quick mode (CI's smoke run, under two minutes) and in
//! full mode (under twenty), and the clock that keeps a run within its budget.

use std::time::{Duration, Instant};

/// The settings of one run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Rounds of the main comparison (A B C … A B C …); figures are medians over rounds.
    pub rounds: usize,
    /// Warm-up per contender, once, before round 1 (its rate also sets the fixed rate).
    pub warmup_s: u64,
    /// One saturation run (wrk, closed loop).
    pub saturation_s: u64,
    pub saturation_connections: u32,
    /// One fixed-rate run (oha, open loop).
    pub rate_s: f64,
    pub rate_connections: u32,
    /// The fixed rate is half the slowest contender's warm-up rate, at most this.
    pub rate_cap: u32,
    /// After a run, how long to wait at most for the contender to go quiet (a create's watcher
    /// settling the tasks it started).
    pub settle_max: Duration,
    /// One point of a scaling curve.
    pub curve_s: u64,
    pub body_sizes: Vec<usize>,
    pub connections: Vec<u32>,
    pub routes: Vec<usize>,
    pub tasks: Vec<u64>,
    pub clients: Vec<u32>,
    /// Idle client connections held at once (memory while they are open and after they close).
    pub idle_connections: Vec<usize>,
    /// Past this, optional work (the largest curve points) is skipped and the output says so.
    pub budget: Duration,
    /// Past this, the run stops everything it started and fails.
    pub hard_limit: Duration,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                rounds: 2,
                warmup_s: 1,
                saturation_s: 1,
                saturation_connections: 64,
                rate_s: 1.0,
                rate_connections: 32,
                rate_cap: 500,
                settle_max: Duration::from_millis(1000),
                curve_s: 1,
                body_sizes: vec![1_000, 100_000, 1_000_000],
                connections: vec![8, 128, 1024],
                routes: vec![1, 1000, 10_000],
                tasks: vec![1_000, 10_000, 100_000],
                clients: vec![1, 16, 64],
                idle_connections: vec![2000],
                // 10 s more than before the paid create (issue 32), which takes about that.
                budget: Duration::from_secs(180),
                hard_limit: Duration::from_secs(250),
            }
        } else {
            Plan {
                quick,
                rounds: 5,
                warmup_s: 2,
                saturation_s: 8,
                saturation_connections: 64,
                rate_s: 8.0,
                rate_connections: 32,
                rate_cap: 1000,
                settle_max: Duration::from_secs(10),
                curve_s: 3,
                body_sizes: vec![1_000, 10_000, 100_000, 1_000_000],
                connections: vec![8, 32, 128, 512, 1024],
                routes: vec![1, 10, 100, 1000, 10_000],
                tasks: vec![1_000, 10_000, 100_000, 1_000_000],
                clients: vec![1, 4, 16, 64, 256],
                idle_connections: vec![500, 2000],
                budget: Duration::from_secs(18 * 60),
                hard_limit: Duration::from_secs(20 * 60),
            }
        }
    }

    pub fn name(&self) -> &'static str {
        if self.quick {
            "quick"
        } else {
            "full"
        }
    }
}

/// The run's clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    started: Instant,
    budget: Duration,
}

impl Clock {
    pub fn new(budget: Duration) -> Clock {
        Clock {
            started: Instant::now(),
            budget,
        }
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Whether `need` more still fits in the budget.
    pub fn fits(&self, need: Duration) -> bool {
        self.started.elapsed() + need <= self.budget
    }
}
