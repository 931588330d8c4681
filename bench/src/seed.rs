//! Seeding a task store with finished tasks, for the stored-tasks curve (10³ → 10⁶).
//!
//! `TaskStore::insert` is one durable write per task (the proxy's group commit makes many
//! concurrent ones cheap, but the seeder has no concurrency to offer), so the seeder hands the
//! store 50 000 tasks at a time with [`TaskStore::insert_many`] (one transaction each), and reads
//! a sample back through [`TaskStore::get`] to prove the rows are ones the store can read.
//!
//! Seeded tasks are completed (the watcher does not resume them after a restart), belong to the
//! bench subject and route, and have ids `seed0000000`, `seed0000001`, … so a load generator can
//! ask for a random one (`task-seed` + 7 random digits below the count).

use std::path::Path;
use std::time::Instant;

use chrono::{Duration as Age, Utc};
use mapping::task::{Input, Output, Status, Step, Task};
use rusqlite::Connection;
use store::{SqliteStore, TaskStore};

/// Digits of a seeded id's number.
pub const WIDTH: usize = 7;

/// The id of the `i`-th seeded task.
pub fn seed_id(i: u64) -> String {
    format!("seed{i:0WIDTH$}")
}

fn task(i: u64, route: &str, subject: &str, plan: &str) -> Task {
    let now = Utc::now() - Age::seconds(i as i64);
    let id = seed_id(i);
    let mut t = Task::new(route, now);
    t.id = id.clone();
    t.upstream_id = Some(format!("done-seed-{i}"));
    t.agent = Some(crate::stack::DID.to_string());
    t.subject = Some(subject.to_string());
    t.plan = Some(plan.to_string());
    t.status = Status::Completed;
    t.status_ref = Some(format!("st-done-seed-{i}"));
    t.input = Input {
        text: Some("a question for the agent".to_string()),
        params: Some(serde_json::json!({"text": "a question for the agent"})),
        artifacts: None,
    };
    t.output = Output {
        text: Some("DONE".to_string()),
        ..Output::default()
    };
    t.turn = 1;
    t.cost = 1;
    let step = |n: u32, name: &str, last: bool, pred: Option<String>| Step {
        id: format!("{id}-s{n}"),
        task_id: id.clone(),
        upstream_id: None,
        order: n,
        name: Some(name.to_string()),
        status: Status::Completed,
        predecessor: pred,
        is_last: last,
        input: Input::default(),
        output: if last {
            Output {
                text: Some("DONE".to_string()),
                ..Output::default()
            }
        } else {
            Output::default()
        },
        cost: u64::from(last),
        created_at: now,
        updated_at: now,
    };
    t.steps = vec![
        step(1, "init", false, None),
        step(2, "running", false, Some(format!("{id}-s1"))),
        step(3, "completed", true, Some(format!("{id}-s2"))),
    ];
    t
}

/// How many seeded tasks the store in `dir` holds.
pub fn count(dir: &Path) -> Result<u64, String> {
    let conn = Connection::open(dir.join("interlingua.db")).map_err(|e| e.to_string())?;
    conn.query_row(
        "SELECT COUNT(*) FROM tasks WHERE id LIKE 'seed%'",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n.max(0) as u64)
    .map_err(|e| e.to_string())
}

/// Adds seeded tasks to the store in `dir` until it holds `target` of them; returns how many
/// were added and how long it took. The proxy must not be running on the store.
pub fn seed(
    dir: &Path,
    route: &str,
    subject: &str,
    plan: &str,
    target: u64,
) -> Result<(u64, f64), String> {
    let started = Instant::now();
    drop(SqliteStore::open(dir).map_err(|e| e.to_string())?);
    let have = count(dir)?;
    insert_batched(dir, have..target, |n| task(n, route, subject, plan))?;
    if target > 0 {
        verify(dir, target - 1, route)?;
    }
    Ok((target.saturating_sub(have), started.elapsed().as_secs_f64()))
}

/// Fills the empty store in `dir` with `n` *unfinished* tasks: running, known to the agent by a
/// `run-` job id the canned upstream always reports as running, so a restarted interlingua's
/// watcher lists and follows every one of them (the memory target is about exactly that).
pub fn seed_unfinished(
    dir: &Path,
    route: &str,
    subject: &str,
    plan: &str,
    n: u64,
) -> Result<(), String> {
    insert_batched(dir, 0..n, |k| {
        let mut t = task(k, route, subject, plan);
        t.status = Status::Running;
        t.upstream_id = Some(format!("run-seed-{k}"));
        t.status_ref = None;
        t.output = Output::default();
        t.cost = 0;
        t.steps.truncate(1);
        t
    })
}

/// Stores the tasks `make` builds for `range`, 50 000 per [`TaskStore::insert_many`] (one
/// transaction, one fsync each), where the proxy's own inserts are one durable write each.
fn insert_batched(
    dir: &Path,
    range: std::ops::Range<u64>,
    make: impl Fn(u64) -> Task,
) -> Result<(), String> {
    const BATCH: u64 = 50_000;
    let store = SqliteStore::open(dir).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let mut i = range.start;
    while i < range.end {
        let end = (i + BATCH).min(range.end);
        let tasks: Vec<Task> = (i..end).map(&make).collect();
        rt.block_on(store.insert_many(&tasks))
            .map_err(|e| e.to_string())?;
        i = end;
    }
    Ok(())
}

/// Adds seeded tasks one [`TaskStore::insert`] at a time, as the proxy writes them (one durable
/// transaction each): the baseline that makes the batched [`seed`] necessary.
pub fn seed_through_store(
    dir: &Path,
    route: &str,
    subject: &str,
    plan: &str,
    target: u64,
) -> Result<(u64, f64), String> {
    let started = Instant::now();
    let have = {
        drop(SqliteStore::open(dir).map_err(|e| e.to_string())?);
        count(dir)?
    };
    let store = SqliteStore::open(dir).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    for i in have..target {
        rt.block_on(store.insert(&task(i, route, subject, plan)))
            .map_err(|e| e.to_string())?;
    }
    Ok((target.saturating_sub(have), started.elapsed().as_secs_f64()))
}

/// Reads seeded task `i` back through the store's own interface.
fn verify(dir: &Path, i: u64, route: &str) -> Result<(), String> {
    let store = SqliteStore::open(dir).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    let got = rt
        .block_on(store.get(&seed_id(i)))
        .map_err(|e| format!("the store cannot read a seeded task: {e}"))?;
    match got {
        Some(s) if s.task.route == route && s.task.status == Status::Completed => Ok(()),
        Some(_) => Err("a seeded task reads back different".to_string()),
        None => Err(format!("seeded task {} is missing", seed_id(i))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_tasks_read_back_through_the_store_and_seeding_resumes() {
        let dir =
            std::env::temp_dir().join(format!("interlingua-bench-seed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (added, _) = seed(&dir, "r", "s", "p", 120).unwrap();
        assert_eq!(added, 120);
        let (added, _) = seed(&dir, "r", "s", "p", 300).unwrap();
        assert_eq!(added, 180);
        assert_eq!(count(&dir).unwrap(), 300);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn seeded_ids_have_fixed_width() {
        assert_eq!(seed_id(42), "seed0000042");
        assert_eq!(seed_id(999_999), "seed0999999");
    }
}
