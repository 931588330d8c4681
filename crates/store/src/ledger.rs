//! The credit ledger's SQL, run inside the store's transactions (the hot statements stay prepared
//! on the connection).

use rusqlite::{params, Connection, OptionalExtension};

use super::store::{backend, StoreError};
use crate::credits::{Account, Balance, LedgerRow, Settled, Settlement};

fn now() -> String {
    mapping::task::time::format_iso_ms(chrono::Utc::now())
}

/// A ledger row to write.
struct Entry<'a> {
    kind: &'a str,
    amount: i64,
    from_hold: i64,
    task: Option<&'a str>,
    step: Option<&'a str>,
    note: Option<&'a str>,
}

impl<'a> Entry<'a> {
    fn new(kind: &'a str, amount: i64) -> Entry<'a> {
        Entry {
            kind,
            amount,
            from_hold: 0,
            task: None,
            step: None,
            note: None,
        }
    }
}

/// Writes a row; `false` when the row already exists (the unique keys, one hold and one release
/// per task and one capture per task and step, turn a repeat into a no-op).
fn row(c: &Connection, account: &Account, e: Entry<'_>) -> Result<bool, StoreError> {
    let n = c
        .prepare_cached(
            "INSERT OR IGNORE INTO ledger (at, plan, subject, kind, amount, from_hold, task_id, step_id, note)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .and_then(|mut s| {
            s.execute(params![now(), account.plan, account.subject, e.kind, e.amount, e.from_hold, e.task, e.step, e.note])
        })
        .map_err(backend)?;
    Ok(n == 1)
}

/// The account's balance (zero for an account never seen).
pub fn balance(c: &Connection, a: &Account) -> Result<Balance, StoreError> {
    let found: Option<(i64, i64, i64)> = c
        .prepare_cached(
            "SELECT granted, captured, held FROM accounts WHERE plan = ?1 AND subject = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![a.plan, a.subject], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .optional()
        })
        .map_err(backend)?;
    let (granted, captured, held) = found.unwrap_or((0, 0, 0));
    Ok(Balance {
        plan: a.plan.clone(),
        subject: a.subject.clone(),
        granted,
        captured,
        held,
    })
}

fn adjust(
    c: &Connection,
    a: &Account,
    granted: i64,
    captured: i64,
    held: i64,
) -> Result<(), StoreError> {
    c.prepare_cached(
        "INSERT INTO accounts (plan, subject, granted, captured, held) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (plan, subject) DO UPDATE SET granted = granted + ?3, captured = captured + ?4, held = held + ?5",
    )
    .and_then(|mut s| s.execute(params![a.plan, a.subject, granted, captured, held]))
    .map_err(backend)?;
    Ok(())
}

/// Grants (or, negative, revokes) credits.
pub fn grant(
    c: &Connection,
    a: &Account,
    amount: i64,
    note: Option<&str>,
) -> Result<Balance, StoreError> {
    if amount < 0 {
        let b = balance(c, a)?;
        if b.available() < -amount {
            return Err(StoreError::Insufficient {
                available: b.available(),
                needed: amount.unsigned_abs(),
            });
        }
    }
    let kind = if amount < 0 { "revoke" } else { "grant" };
    row(
        c,
        a,
        Entry {
            note,
            ..Entry::new(kind, amount.abs())
        },
    )?;
    adjust(c, a, amount, 0, 0)?;
    balance(c, a)
}

/// Holds credits for a new task (the caller has checked the balance in the same transaction).
pub fn hold(c: &Connection, task: &str, a: &Account, amount: u64) -> Result<(), StoreError> {
    let amount = amount as i64;
    if !row(
        c,
        a,
        Entry {
            task: Some(task),
            ..Entry::new("hold", amount)
        },
    )? {
        return Ok(());
    }
    c.prepare_cached(
        "INSERT INTO holds (task_id, plan, subject, amount, remaining, open) VALUES (?1, ?2, ?3, ?4, ?4, 1)",
    )
    .and_then(|mut s| s.execute(params![task, a.plan, a.subject, amount]))
    .map_err(backend)?;
    adjust(c, a, 0, 0, amount)
}

/// The plan of the account a task's hold was taken from, if it holds credits.
pub fn plan_of_hold(c: &Connection, task: &str) -> Result<Option<String>, StoreError> {
    c.prepare_cached("SELECT plan FROM holds WHERE task_id = ?1")
        .and_then(|mut s| s.query_row([task], |r| r.get(0)).optional())
        .map_err(backend)
}

/// Captures and releases for one task. The account and the hold are written once, with the
/// settlement's totals: a settlement is one job of the writer, and its statements are the
/// writer's hottest.
pub fn settle(c: &Connection, task: &str, s: &Settlement) -> Result<Settled, StoreError> {
    let mut settled = Settled::default();
    if s.is_empty() {
        return Ok(settled);
    }
    let hold: Option<(String, String, i64, bool)> = c
        .prepare_cached("SELECT plan, subject, remaining, open FROM holds WHERE task_id = ?1")
        .and_then(|mut s| {
            s.query_row([task], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                .optional()
        })
        .map_err(backend)?;
    // Credits belong to the account that held them; a task without a hold is free.
    let Some((plan, subject, held_at_start, open)) = hold else {
        return Ok(settled);
    };
    let account = Account::new(&plan, &subject);
    let mut remaining = held_at_start;
    let (mut captured, mut from_holds) = (0, 0);
    // The balance is read only when a capture costs more than the hold has left, and what this
    // settlement has already charged beyond the hold counts against it.
    let mut beyond_hold = 0;
    for cap in &s.captures {
        let amount = cap.amount as i64;
        let from_hold = amount.min(if open { remaining } else { 0 });
        let charged = if amount > from_hold {
            let available = (balance(c, &account)?.available() - beyond_hold).max(0);
            from_hold + (amount - from_hold).min(available)
        } else {
            amount
        };
        let note = (charged < amount)
            .then(|| format!("{} credits not covered by the balance", amount - charged));
        let entry = Entry {
            from_hold,
            task: Some(task),
            step: Some(&cap.step_id),
            note: note.as_deref(),
            ..Entry::new("capture", charged)
        };
        if !row(c, &account, entry)? {
            continue;
        }
        remaining -= from_hold;
        from_holds += from_hold;
        captured += charged;
        beyond_hold += charged - from_hold;
    }
    let mut released = 0;
    let release = s.release && open;
    if release {
        let entry = Entry {
            task: Some(task),
            ..Entry::new("release", remaining)
        };
        if row(c, &account, entry)? {
            released = remaining;
        }
        remaining = 0;
    }
    if captured != 0 || from_holds != 0 || released != 0 {
        adjust(c, &account, 0, captured, -(from_holds + released))?;
    }
    if remaining != held_at_start || release {
        c.prepare_cached("UPDATE holds SET remaining = ?1, open = ?2 WHERE task_id = ?3")
            .and_then(|mut s| s.execute(params![remaining, open && !release, task]))
            .map_err(backend)?;
    }
    settled.captured = captured as u64;
    settled.released = released as u64;
    Ok(settled)
}

/// An account's rows, newest first.
pub fn history(c: &Connection, a: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError> {
    let mut stmt = c
        .prepare(
            "SELECT seq, at, plan, subject, kind, amount, from_hold, task_id, step_id, note FROM ledger
             WHERE plan = ?1 AND subject = ?2 ORDER BY seq DESC LIMIT ?3",
        )
        .map_err(backend)?;
    let rows = stmt
        .query_map(params![a.plan, a.subject, limit.clamp(1, 10_000)], |r| {
            Ok(LedgerRow {
                seq: r.get(0)?,
                at: r.get(1)?,
                plan: r.get(2)?,
                subject: r.get(3)?,
                kind: r.get(4)?,
                amount: r.get(5)?,
                from_hold: r.get(6)?,
                task_id: r.get(7)?,
                step_id: r.get(8)?,
                note: r.get(9)?,
            })
        })
        .map_err(backend)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    Ok(rows)
}

/// An account's totals added up from its rows alone: granted, captured, held (what holds
/// took, less what captures took from them and releases gave back). Followed by a `WHERE`.
const FROM_ROWS: &str = "
    COALESCE(SUM(CASE kind WHEN 'grant' THEN amount WHEN 'revoke' THEN -amount ELSE 0 END), 0),
    COALESCE(SUM(CASE kind WHEN 'capture' THEN amount ELSE 0 END), 0),
    COALESCE(SUM(CASE kind WHEN 'hold' THEN amount WHEN 'capture' THEN -from_hold
                           WHEN 'release' THEN -amount ELSE 0 END), 0)
    FROM ledger";

/// The balance from the rows alone.
pub fn recompute(c: &Connection, a: &Account) -> Result<Balance, StoreError> {
    let (granted, captured, held) = c
        .query_row(
            &format!("SELECT {FROM_ROWS} WHERE plan = ?1 AND subject = ?2"),
            params![a.plan, a.subject],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(backend)?;
    Ok(Balance {
        plan: a.plan.clone(),
        subject: a.subject.clone(),
        granted,
        captured,
        held,
    })
}

/// Every account whose balance differs from its rows (an account with rows and no balance, or
/// the reverse, too): the balance, and what the rows say.
pub fn drifts(c: &Connection) -> Result<Vec<(Balance, Balance)>, StoreError> {
    let totals = |sql: &str| -> Result<Vec<Balance>, StoreError> {
        let mut stmt = c.prepare(sql).map_err(backend)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Balance {
                    plan: r.get(0)?,
                    subject: r.get(1)?,
                    granted: r.get(2)?,
                    captured: r.get(3)?,
                    held: r.get(4)?,
                })
            })
            .map_err(backend)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend);
        rows
    };
    let kept = totals("SELECT plan, subject, granted, captured, held FROM accounts")?;
    let added = totals(&format!(
        "SELECT plan, subject, {FROM_ROWS} GROUP BY plan, subject"
    ))?;
    let zero = |b: &Balance| Balance {
        granted: 0,
        captured: 0,
        held: 0,
        ..b.clone()
    };
    let mut both: std::collections::BTreeMap<(String, String), (Option<Balance>, Option<Balance>)> =
        Default::default();
    for b in kept {
        let key = (b.plan.clone(), b.subject.clone());
        both.entry(key).or_default().0 = Some(b);
    }
    for b in added {
        let key = (b.plan.clone(), b.subject.clone());
        both.entry(key).or_default().1 = Some(b);
    }
    Ok(both
        .into_values()
        .filter_map(|pair| match pair {
            (Some(k), Some(a)) => (k != a).then_some((k, a)),
            (Some(k), None) => (k != zero(&k)).then(|| (k.clone(), zero(&k))),
            (None, Some(a)) => (a != zero(&a)).then(|| (zero(&a), a)),
            (None, None) => None,
        })
        .collect())
}

/// Every hold not yet released: its task id, account, what it still holds, and its task's
/// document (`None` when there is no such task).
#[allow(clippy::type_complexity)]
pub fn open_holds(
    c: &Connection,
) -> Result<Vec<(String, Account, i64, Option<String>)>, StoreError> {
    let mut stmt = c
        .prepare(
            "SELECT h.task_id, h.plan, h.subject, h.remaining, t.doc
             FROM holds h LEFT JOIN tasks t ON t.id = h.task_id WHERE h.open = 1",
        )
        .map_err(backend)?;
    let rows = stmt
        .query_map([], |r| {
            let account = Account::new(&r.get::<_, String>(1)?, &r.get::<_, String>(2)?);
            Ok((r.get(0)?, account, r.get(3)?, r.get(4)?))
        })
        .map_err(backend)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend);
    rows
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use crate::credits::{Account, Capture, Hold, LedgerRow, Settlement};
    use crate::{SqliteStore, TaskStore};
    use mapping::task::Task;

    fn capture(step: &str, amount: u64) -> Capture {
        Capture {
            step_id: step.to_string(),
            amount,
        }
    }

    /// A store with `granted` credits for ann, and a task holding `held` of them.
    async fn held(granted: i64, held: u64) -> (SqliteStore, Account, Task) {
        let store = SqliteStore::in_memory().unwrap();
        let ann = Account::new("gold", "ann");
        store.grant(&ann, granted, None).await.unwrap();
        let task = Task::new("r", Utc::now());
        let hold = Hold {
            plan: "gold".to_string(),
            subject: "ann".to_string(),
            amount: held,
        };
        store.insert_with_hold(&task, Some(&hold)).await.unwrap();
        (store, ann, task)
    }

    /// Checks ann's ledger, oldest row first (kind, amount, from_hold, note), and her balance
    /// (captured, held, available), which the rows must add up to.
    async fn assert_ledger(
        store: &SqliteStore,
        ann: &Account,
        rows: &[(&str, i64, i64, Option<&str>)],
        balance: (i64, i64, i64),
    ) {
        let history: Vec<LedgerRow> = store.history(ann, 100).await.unwrap();
        let found: Vec<_> = history
            .iter()
            .rev()
            .map(|r| (r.kind.as_str(), r.amount, r.from_hold, r.note.as_deref()))
            .collect();
        assert_eq!(found, rows);
        let b = store.balance(ann).await.unwrap();
        assert_eq!((b.captured, b.held, b.available()), balance);
        assert_eq!(store.recompute(ann).await.unwrap(), b);
    }

    #[tokio::test]
    async fn captures_beyond_the_hold_take_the_balance_and_note_what_it_did_not_cover() {
        // 10 granted, 4 held; the steps cost 3, 5 and 4: the first from the hold, the second
        // 1 from the hold and 4 from the balance, the third only the 2 the balance has left.
        let (store, ann, task) = held(10, 4).await;
        let settlement = Settlement {
            captures: vec![capture("a", 3), capture("b", 5), capture("c", 4)],
            release: true,
        };
        let v = store.update(&task, 1).await.unwrap();
        let (_, settled) = store
            .update_and_settle(&task, v, &settlement)
            .await
            .unwrap();
        assert_eq!((settled.captured, settled.released), (10, 0));
        assert_ledger(
            &store,
            &ann,
            &[
                ("grant", 10, 0, None),
                ("hold", 4, 0, None),
                ("capture", 3, 3, None),
                ("capture", 5, 1, None),
                (
                    "capture",
                    2,
                    0,
                    Some("2 credits not covered by the balance"),
                ),
                ("release", 0, 0, None),
            ],
            (10, 0, 0),
        )
        .await;
    }

    #[tokio::test]
    async fn a_capture_is_charged_once_and_the_release_frees_the_rest_once() {
        let (store, ann, task) = held(10, 4).await;
        let first = Settlement {
            captures: vec![capture("a", 1)],
            release: false,
        };
        let end = Settlement {
            captures: vec![capture("a", 1)],
            release: true,
        };
        let a = store.charge(&task.id, &first.captures[0]).await.unwrap();
        let b = store.charge(&task.id, &first.captures[0]).await.unwrap();
        assert_eq!((a.captured, b.captured), (1, 0));
        let v = store.update(&task, 1).await.unwrap();
        let (v, ended) = store.update_and_settle(&task, v, &end).await.unwrap();
        assert_eq!((ended.captured, ended.released), (0, 3));
        let (_, again) = store.update_and_settle(&task, v, &end).await.unwrap();
        assert_eq!((again.captured, again.released), (0, 0));
        assert_ledger(
            &store,
            &ann,
            &[
                ("grant", 10, 0, None),
                ("hold", 4, 0, None),
                ("capture", 1, 1, None),
                ("release", 3, 0, None),
            ],
            (1, 0, 9),
        )
        .await;
    }
}
