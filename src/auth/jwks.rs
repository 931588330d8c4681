//! JSON Web Key Sets, from a file or a URL.
//!
//! A set is read when first needed, and again when a token names a `kid` it lacks or when the
//! copy is older than the refresh interval, but never more than once per interval: a flood of
//! tokens with made-up `kid`s costs the key server one request per interval, not one per token.
//! Each read *replaces* the copy, so a key withdrawn from the set stops verifying at the first
//! read after its withdrawal; each copy has a generation, so what was verified with an older copy
//! can be checked again. A read that fails keeps the last copy (the key server being down must
//! not lock every client out).

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use parking_lot::RwLock;
use tokio::sync::Mutex;

use super::AuthError;
use crate::config::Url;
use crate::config::{JwksSource, Key};
use crate::upstream::Client;

/// Why a key set could not be read (logged; the last copy keeps serving).
#[derive(Debug, thiserror::Error)]
enum ReadError {
    #[error("{path}: {detail}")]
    File { path: String, detail: String },
    #[error(transparent)]
    Url(#[from] crate::config::UrlError),
    #[error(transparent)]
    Fetch(#[from] crate::upstream::FetchError),
    #[error("status {0}")]
    Status(u16),
    #[error("not a JWK set: {0}")]
    NotJwks(String),
}

/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// One usable key of a set.
#[derive(Clone)]
pub struct SetKey {
    /// Its `kid`; a key without one is tried only for tokens without one.
    pub kid: Option<String>,
    /// The configured algorithms that fit the key (its family, and its own `alg` when it names one).
    pub algorithms: Vec<Algorithm>,
    pub key: DecodingKey,
}

/// A copy of a set, as read at one time.
pub struct Snapshot {
    /// Counts the reads that succeeded: 0 before the first one.
    pub generation: u64,
    pub keys: Vec<SetKey>,
    read_at: Option<Instant>,
}

impl Snapshot {
    pub fn get(&self, kid: &str) -> Option<&SetKey> {
        self.keys.iter().find(|k| k.kid.as_deref() == Some(kid))
    }
}

/// One configured key set.
pub struct KeySet {
    id: String,
    source: JwksSource,
    refresh_interval: Duration,
    algorithms: Vec<Algorithm>,
    client: Arc<Client>,
    current: RwLock<Arc<Snapshot>>,
    /// When the set was last read (or tried); only one read runs at a time.
    last_fetch: Mutex<Option<Instant>>,
}

impl KeySet {
    pub fn new(
        k: &Key,
        source: JwksSource,
        refresh_interval: Duration,
        client: Arc<Client>,
    ) -> KeySet {
        KeySet {
            id: k.id.clone(),
            source,
            refresh_interval,
            algorithms: k.algorithms.clone(),
            client,
            current: RwLock::new(Arc::new(Snapshot {
                generation: 0,
                keys: Vec::new(),
                read_at: None,
            })),
            last_fetch: Mutex::new(None),
        }
    }

    /// The `id` the config gives the set.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the config lets this set's keys verify `alg` (a set that cannot is not read for a
    /// token without `kid` signed with it).
    pub fn allows(&self, alg: Algorithm) -> bool {
        self.algorithms.contains(&alg)
    }

    /// The current copy of the set, read again first when it has never been read, is older than
    /// the refresh interval, or lacks `kid` — unless the last read is more recent than the
    /// interval. Fails only when a read was needed for `kid` (or for a first copy) and failed.
    pub async fn current(&self, kid: Option<&str>) -> Result<Arc<Snapshot>, AuthError> {
        let wants_read = |s: &Snapshot| {
            s.read_at
                .is_none_or(|at| at.elapsed() >= self.refresh_interval)
                || kid.is_some_and(|k| s.get(k).is_none())
        };
        // Without a copy or this kid, the answer waits for the read; a copy merely old enough
        // to be read again serves while another request reads it.
        let lacking = |s: &Snapshot| s.read_at.is_none() || kid.is_some_and(|k| s.get(k).is_none());
        let copy = self.current.read().clone();
        if !wants_read(&copy) {
            return Ok(copy);
        }
        let mut last = if lacking(&copy) {
            self.last_fetch.lock().await
        } else {
            match self.last_fetch.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(copy),
            }
        };
        // Another request may have read the set while this one waited.
        let copy = self.current.read().clone();
        if !wants_read(&copy) || last.is_some_and(|at| at.elapsed() < self.refresh_interval) {
            return Ok(copy);
        }
        *last = Some(Instant::now());
        // Boxed: a fetch (a connection, TLS) is a large future, and every token check awaits
        // this one; held inline, each request would carry and copy it for a read made once per
        // `refresh_interval` at most.
        match Box::pin(self.read()).await {
            Ok(set) => {
                let fresh = Arc::new(Snapshot {
                    generation: copy.generation + 1,
                    keys: set.keys.iter().filter_map(|j| self.entry(j)).collect(),
                    read_at: Some(Instant::now()),
                });
                *self.current.write() = fresh.clone();
                Ok(fresh)
            }
            Err(e) => {
                tracing::warn!(key_set = %self.id, "cannot read the key set: {e}");
                if lacking(&copy) {
                    Err(AuthError::KeysUnavailable(format!("key set `{}`", self.id)))
                } else {
                    Ok(copy)
                }
            }
        }
    }

    async fn read(&self) -> Result<JwkSet, ReadError> {
        let bytes = match &self.source {
            JwksSource::File(path) => tokio::fs::read(path).await.map_err(|e| ReadError::File {
                path: path.display().to_string(),
                detail: e.to_string(),
            })?,
            JwksSource::Url(url) => {
                let url = Url::parse(url)?;
                let (status, body) = self.client.fetch(&url, FETCH_TIMEOUT).await?;
                if status != 200 {
                    return Err(ReadError::Status(status));
                }
                body.to_vec()
            }
        };
        serde_json::from_slice(&bytes).map_err(|e| ReadError::NotJwks(e.to_string()))
    }

    /// A usable key of the set: it parses, and fits one of the allowed algorithms (its own
    /// `alg`, when it names one).
    fn entry(&self, jwk: &Jwk) -> Option<SetKey> {
        let key = DecodingKey::from_jwk(jwk).ok()?;
        let named: Option<Algorithm> = jwk
            .common
            .key_algorithm
            .and_then(|a| Algorithm::try_from(a).ok());
        let algorithms: Vec<Algorithm> = self
            .algorithms
            .iter()
            .copied()
            .filter(|a| a.family() == key.family() && named.is_none_or(|n| n == *a))
            .collect();
        (!algorithms.is_empty()).then(|| SetKey {
            kid: jwk.common.key_id.clone(),
            algorithms,
            key,
        })
    }
}
