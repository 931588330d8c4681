//! JSON Web Key Sets, from a file or a URL, cached with `moka`.
//!
//! A `kid` not in the cache makes the set be read again, but at most once per refresh interval:
//! a flood of tokens with made-up `kid`s costs the key server one request per interval, not one
//! per token. Keys also leave the cache after a while, so a rotated-out key stops verifying.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey};
use moka::sync::Cache;
use tokio::sync::Mutex;

use super::AuthError;
use crate::config::{JwksSource, Key};
use crate::engine::client::{Client, Url};

/// How long a fetched key is trusted without being seen in the set again.
const KEY_TTL: Duration = Duration::from_secs(3600);
/// How long a fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// One configured key set.
pub struct KeySet {
    id: String,
    source: JwksSource,
    refresh_interval: Duration,
    algorithms: Vec<Algorithm>,
    client: Arc<Client>,
    keys: Cache<String, (Vec<Algorithm>, DecodingKey)>,
    /// When the set was last read; only one fetch runs at a time.
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
            keys: Cache::builder().time_to_live(KEY_TTL).build(),
            last_fetch: Mutex::new(None),
        }
    }

    /// The key with this `kid`, reading the set again if it is unknown and the last read is older
    /// than the refresh interval.
    pub async fn get(&self, kid: &str) -> Result<Option<(Vec<Algorithm>, DecodingKey)>, AuthError> {
        if let Some(k) = self.keys.get(kid) {
            return Ok(Some(k));
        }
        let mut last = self.last_fetch.lock().await;
        // Another request may have refreshed while this one waited.
        if let Some(k) = self.keys.get(kid) {
            return Ok(Some(k));
        }
        if last.is_some_and(|at| at.elapsed() < self.refresh_interval) {
            return Ok(None);
        }
        *last = Some(Instant::now());
        let set = self.read().await.map_err(|e| {
            tracing::warn!(key_set = %self.id, "cannot read the key set: {e}");
            AuthError::KeysUnavailable(format!("key set `{}`", self.id))
        })?;
        for jwk in &set.keys {
            if let Some((kid, entry)) = self.entry(jwk) {
                self.keys.insert(kid, entry);
            }
        }
        Ok(self.keys.get(kid))
    }

    async fn read(&self) -> Result<JwkSet, String> {
        let bytes = match &self.source {
            JwksSource::File(path) => tokio::fs::read(path)
                .await
                .map_err(|e| format!("{}: {e}", path.display()))?,
            JwksSource::Url(url) => {
                let url = Url::parse(url)?;
                let (status, body) = self.client.fetch(&url, FETCH_TIMEOUT).await?;
                if status != 200 {
                    return Err(format!("status {status}"));
                }
                body.to_vec()
            }
        };
        serde_json::from_slice(&bytes).map_err(|e| format!("not a JWK set: {e}"))
    }

    /// A usable key of the set: it has a `kid`, parses, and fits one of the allowed algorithms
    /// (its own `alg`, when it names one).
    fn entry(&self, jwk: &Jwk) -> Option<(String, (Vec<Algorithm>, DecodingKey))> {
        let kid = jwk.common.key_id.clone()?;
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
        (!algorithms.is_empty()).then_some((kid, (algorithms, key)))
    }
}
