//! How many durable creates a second the store itself sustains, without the proxy around it: run
//! by hand, in release mode, to tell the store's share of a create from the pipeline's.
//!
//! ```sh
//! STORE_CLIENTS=64 STORE_SECONDS=5 taskset -c 1 \
//!     cargo test --release -p interlingua-store --lib throughput -- --ignored --nocapture
//! ```
//!
//! `STORE_BACKEND=postgres` measures PostgreSQL instead (a cluster of its own, with PostgreSQL's
//! default durability: `testkit::postgres::Postgres::durable`). `STORE_ACCOUNTS` spreads the
//! holds over that many accounts (default 1): on PostgreSQL a hold locks its account's row until
//! its transaction commits, so creates on one account commit one after another.
//!
//! Each client does what one create through the full pipeline asks of the store: the task with
//! its hold, the update when the agent accepts it, the watcher's read, and the update that
//! completes it (a capture and the release).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::credits::{Account, Capture, Hold, Settlement};
use crate::{Leases, Location, Migrations, TaskStore};
use mapping::task::{Status, Task};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn create(store: &dyn TaskStore, hold: &Hold) {
    let mut task = Task::new("r", Utc::now());
    // As the engine makes them: the caller's plan and subject, whose account holds.
    task.subject = Some(hold.subject.clone());
    task.plan = Some(hold.plan.clone());
    store.insert_with_hold(&task, Some(hold)).await.unwrap();
    task.status = Status::Running;
    let v = store
        .update_and_settle(&task, 1, &Settlement::default())
        .await
        .unwrap()
        .0;
    let stored = store.get(&task.id).await.unwrap().unwrap();
    task.status = Status::Completed;
    let done = Settlement {
        captures: vec![Capture {
            step_id: format!("{}-s1", task.id),
            amount: 1,
        }],
        release: true,
    };
    assert_eq!(stored.version, v);
    store.update_and_settle(&task, v, &done).await.unwrap();
}

#[test]
#[ignore = "a measurement, run by hand"]
fn durable_creates_per_second() {
    let clients = setting("STORE_CLIENTS", 64);
    let seconds = setting("STORE_SECONDS", 5);
    // One worker thread, as the benchmark runs the proxy.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let accounts = setting("STORE_ACCOUNTS", 1).max(1);
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = None;
    let location = match std::env::var("STORE_BACKEND").as_deref() {
        Ok("postgres") => {
            // STORE_PG_FSYNC=off: the tests' cluster, to tell the disk's share from the rest.
            let pg = cluster.insert(match std::env::var("STORE_PG_FSYNC").as_deref() {
                Ok("off") => testkit::postgres::Postgres::start(),
                _ => testkit::postgres::Postgres::durable(),
            });
            Location::Postgres {
                url: pg.database("throughput"),
                password: None,
                pool_max: clients as usize,
            }
        }
        _ => Location::Sqlite(dir.path().to_path_buf()),
    };
    let store = rt
        .block_on(crate::open(&location, Leases::default(), Migrations::Apply))
        .unwrap();
    let subjects: Vec<String> = (0..accounts).map(|n| format!("ann{n}")).collect();
    for subject in &subjects {
        rt.block_on(store.grant(&Account::new("gold", subject), 1 << 40, None))
            .unwrap();
    }
    let until = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let count = Arc::new(AtomicU64::new(0));
    let done: u64 = rt.block_on(async {
        // Creates in each second: the rate falls as the database grows (its random keys reach
        // ever more pages).
        let ticks = count.clone();
        tokio::spawn(async move {
            let mut last = 0;
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = ticks.load(Ordering::Relaxed);
                print!("{} ", now - last);
                last = now;
            }
        });
        let workers: Vec<_> = (0..clients)
            .map(|i| {
                let store = store.clone();
                let count = count.clone();
                let subject = subjects[i as usize % subjects.len()].clone();
                tokio::spawn(async move {
                    let hold = Hold {
                        plan: "gold".to_string(),
                        subject,
                        amount: 1,
                    };
                    let mut n = 0u64;
                    while Instant::now() < until {
                        create(&*store, &hold).await;
                        n += 1;
                        count.fetch_add(1, Ordering::Relaxed);
                    }
                    n
                })
            })
            .collect();
        let mut total = 0;
        for w in workers {
            total += w.await.unwrap();
        }
        total
    });
    let secs = started.elapsed().as_secs_f64();
    for subject in &subjects {
        let account = Account::new("gold", subject);
        let balance = rt.block_on(store.balance(&account)).unwrap();
        assert_eq!(rt.block_on(store.recompute(&account)).unwrap(), balance);
    }
    println!(
        "{} {clients} clients, {accounts} accounts: {done} creates in {secs:.1} s = {:.0} creates/s",
        store.backend(),
        done as f64 / secs
    );
    drop(store);
    drop(cluster);
}
