//! The credit ledger's SQL, run inside the store's transactions (the hot statements stay prepared
//! on the connection).

use rusqlite::{params, Connection, OptionalExtension};

use super::error::{backend, StoreError};
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
    Ok(balance_of(a, found.unwrap_or((0, 0, 0))))
}

/// An account's balance from its totals: granted, captured, held.
pub(crate) fn balance_of(a: &Account, (granted, captured, held): (i64, i64, i64)) -> Balance {
    Balance {
        plan: a.plan.clone(),
        subject: a.subject.clone(),
        granted,
        captured,
        held,
    }
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

/// Takes back up to `amount` granted to `a` that it was never owed (an authorisation that was
/// not settled), as far as the available balance has it: a revoke never takes a balance below
/// zero. Returns what was taken.
pub fn revoke(c: &Connection, a: &Account, amount: i64, note: &str) -> Result<i64, StoreError> {
    let taken = amount.min(balance(c, a)?.available()).max(0);
    if taken > 0 {
        grant(c, a, -taken, Some(note))?;
    }
    Ok(taken)
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

/// What a settlement writes: the ledger rows (each written only if new), then the account's and
/// the hold's changes, from the rows actually written. Both backends run it: SQLite in the
/// writer's transaction, PostgreSQL with the hold and the account locked.
pub(crate) struct Plan {
    /// The hold's remaining credits at the start, and whether it is open.
    pub(crate) held_at_start: i64,
    pub(crate) open: bool,
    remaining: i64,
    captured: i64,
    from_holds: i64,
    released: i64,
    /// What this settlement has charged beyond the hold: it counts against the balance.
    beyond_hold: i64,
}

/// A ledger row the plan asks for: written, or found there already (`false`).
pub(crate) struct Planned {
    pub(crate) kind: &'static str,
    pub(crate) amount: i64,
    pub(crate) from_hold: i64,
    pub(crate) step: Option<String>,
    pub(crate) note: Option<String>,
}

impl Plan {
    pub(crate) fn new(held_at_start: i64, open: bool) -> Plan {
        Plan {
            held_at_start,
            open,
            remaining: held_at_start,
            captured: 0,
            from_holds: 0,
            released: 0,
            beyond_hold: 0,
        }
    }

    /// Settles `s`: `available` reads the account's balance (only when a capture costs more
    /// than the hold has left), `write` writes a row and says whether it was new.
    pub(crate) fn run(
        &mut self,
        s: &Settlement,
        available: &mut dyn FnMut() -> Result<i64, StoreError>,
        write: &mut dyn FnMut(Planned) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        for cap in &s.captures {
            let amount = cap.amount as i64;
            let from_hold = amount.min(if self.open { self.remaining } else { 0 });
            let charged = if amount > from_hold {
                let available = (available()? - self.beyond_hold).max(0);
                from_hold + (amount - from_hold).min(available)
            } else {
                amount
            };
            let note = (charged < amount)
                .then(|| format!("{} credits not covered by the balance", amount - charged));
            let entry = Planned {
                kind: "capture",
                amount: charged,
                from_hold,
                step: Some(cap.step_id.clone()),
                note,
            };
            if !write(entry)? {
                continue;
            }
            self.remaining -= from_hold;
            self.from_holds += from_hold;
            self.captured += charged;
            self.beyond_hold += charged - from_hold;
        }
        if self.releases(s) {
            let entry = Planned {
                kind: "release",
                amount: self.remaining,
                from_hold: 0,
                step: None,
                note: None,
            };
            if write(entry)? {
                self.released = self.remaining;
            }
            self.remaining = 0;
        }
        Ok(())
    }

    fn releases(&self, s: &Settlement) -> bool {
        s.release && self.open
    }

    /// The account's change (granted, captured, held), if any.
    pub(crate) fn account(&self) -> Option<(i64, i64)> {
        (self.captured != 0 || self.from_holds != 0 || self.released != 0)
            .then_some((self.captured, -(self.from_holds + self.released)))
    }

    /// The hold's new remaining and open, if it changed.
    pub(crate) fn hold(&self, s: &Settlement) -> Option<(i64, bool)> {
        let release = self.releases(s);
        (self.remaining != self.held_at_start || release)
            .then_some((self.remaining, self.open && !release))
    }

    pub(crate) fn settled(&self) -> Settled {
        Settled {
            captured: self.captured as u64,
            released: self.released as u64,
        }
    }
}

/// Captures and releases for one task. The account and the hold are written once, with the
/// settlement's totals: a settlement is one job of the writer, and its statements are the
/// writer's hottest.
pub fn settle(c: &Connection, task: &str, s: &Settlement) -> Result<Settled, StoreError> {
    if s.is_empty() {
        return Ok(Settled::default());
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
        return Ok(Settled::default());
    };
    let account = Account::new(&plan, &subject);
    let mut plan = Plan::new(held_at_start, open);
    plan.run(s, &mut || Ok(balance(c, &account)?.available()), &mut |p| {
        let entry = Entry {
            from_hold: p.from_hold,
            task: Some(task),
            step: p.step.as_deref(),
            note: p.note.as_deref(),
            ..Entry::new(p.kind, p.amount)
        };
        row(c, &account, entry)
    })?;
    if let Some((captured, held)) = plan.account() {
        adjust(c, &account, 0, captured, held)?;
    }
    if let Some((remaining, open)) = plan.hold(s) {
        c.prepare_cached("UPDATE holds SET remaining = ?1, open = ?2 WHERE task_id = ?3")
            .and_then(|mut s| s.execute(params![remaining, open, task]))
            .map_err(backend)?;
    }
    Ok(plan.settled())
}

/// A ledger row's columns, in the order [`ledger_row`] reads them.
/// The kinds of row that belong to a task, each with a unique key on `task_id` (v1's
/// `ledger_*_once`), through which a task's rows are read ([`task_rows_sql`]). A new kind with
/// a task needs its key and its place here (`reports::tests` checks that each is read by its
/// key).
pub(crate) const TASK_KINDS: [&str; 3] = ["hold", "capture", "release"];

/// A task's rows in the order written: one arm per kind of [`TASK_KINDS`], each read by that
/// kind's unique key. `param` is the backend's placeholder for the task id (`?1`, `$1`).
pub(crate) fn task_rows_sql(param: &str) -> String {
    let arms: Vec<String> = TASK_KINDS
        .iter()
        .map(|k| {
            format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE task_id = {param} AND kind = '{k}'")
        })
        .collect();
    format!("{} ORDER BY seq", arms.join(" UNION ALL "))
}

pub(crate) const LEDGER_COLUMNS: &str =
    "seq, at, plan, subject, kind, amount, from_hold, task_id, step_id, note";

/// A row of [`LEDGER_COLUMNS`].
pub(crate) fn ledger_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LedgerRow> {
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
}

/// An account's rows, newest first.
pub fn history(c: &Connection, a: &Account, limit: u32) -> Result<Vec<LedgerRow>, StoreError> {
    let mut stmt = c
        .prepare(&format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger
             WHERE plan = ?1 AND subject = ?2 ORDER BY seq DESC LIMIT ?3"
        ))
        .map_err(backend)?;
    let rows = stmt
        .query_map(
            params![a.plan, a.subject, limit.clamp(1, 10_000)],
            ledger_row,
        )
        .map_err(backend)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    Ok(rows)
}

/// An account's totals added up from its rows alone: granted, captured, held (what holds
/// took, less what captures took from them and releases gave back). Followed by a `WHERE`.
pub(crate) const FROM_ROWS: &str = "
    COALESCE(SUM(CASE kind WHEN 'grant' THEN amount WHEN 'revoke' THEN -amount ELSE 0 END), 0),
    COALESCE(SUM(CASE kind WHEN 'capture' THEN amount ELSE 0 END), 0),
    COALESCE(SUM(CASE kind WHEN 'hold' THEN amount WHEN 'capture' THEN -from_hold
                           WHEN 'release' THEN -amount ELSE 0 END), 0)
    FROM ledger";

/// The balance from the rows alone.
pub fn recompute(c: &Connection, a: &Account) -> Result<Balance, StoreError> {
    let totals = c
        .query_row(
            &format!("SELECT {FROM_ROWS} WHERE plan = ?1 AND subject = ?2"),
            params![a.plan, a.subject],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(backend)?;
    Ok(balance_of(a, totals))
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
    Ok(compare(kept, added))
}

/// The accounts whose kept balance (`kept`) differs from what their rows add up to (`added`).
pub(crate) fn compare(kept: Vec<Balance>, added: Vec<Balance>) -> Vec<(Balance, Balance)> {
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
    both.into_values()
        .filter_map(|pair| match pair {
            (Some(k), Some(a)) => (k != a).then_some((k, a)),
            (Some(k), None) => (k != zero(&k)).then(|| (k.clone(), zero(&k))),
            (None, Some(a)) => (a != zero(&a)).then(|| (zero(&a), a)),
            (None, None) => None,
        })
        .collect()
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
