//! The JSON documents the purchases, sales and escrow sales tables keep in their `doc` column:
//! encoded only when they can be read back, decoded, and read by a query on SQLite (PostgreSQL's
//! modules read theirs through the same [`decode`]).

use rusqlite::{Connection, OptionalExtension};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::{backend, StoreError};
use mapping::depth::Unwritable;

/// A record's JSON document, as a table's `doc` column keeps it; [`StoreError::TooDeep`] if it
/// could not be read back.
pub(crate) fn encode<T: Serialize>(value: &T, what: &str) -> Result<String, StoreError> {
    mapping::depth::readable_json(value).map_err(|e| match e {
        Unwritable::TooDeep(deep) => deep.into(),
        Unwritable::Json(e) => StoreError::Backend(format!("encoding {what}: {e}")),
    })
}

/// A stored document, decoded; a [`StoreError::Backend`] naming `what` if it cannot be.
pub(crate) fn decode<T: DeserializeOwned>(doc: &str, what: &str) -> Result<T, StoreError> {
    serde_json::from_str(doc)
        .map_err(|e| StoreError::Backend(format!("decoding stored {what}: {e}")))
}

/// The document in the first column of the row `sql` finds, if any, decoded by `decode`.
pub(crate) fn one<T>(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: fn(&str) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let doc: Option<String> = c
        .prepare_cached(sql)
        .and_then(|mut st| st.query_row(params, |r| r.get(0)).optional())
        .map_err(backend)?;
    doc.as_deref().map(decode).transpose()
}

/// The documents in the first column of the rows `sql` finds, in its order, decoded by `decode`.
pub(crate) fn all<T>(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: fn(&str) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut st = c.prepare_cached(sql).map_err(backend)?;
    let docs = st
        .query_map(params, |r| r.get::<_, String>(0))
        .map_err(backend)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    docs.iter().map(|d| decode(d)).collect()
}
