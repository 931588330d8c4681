//! The paying client of the x402 contender: a `PAYMENT-SIGNATURE` header for every request, each
//! with a nonce of its own (interlingua refuses a payment presented twice, as the token contract
//! would), shaped as the x402 SDK sends an `exact` payment on an EVM network: an EIP-3009
//! authorization and its signature, and the route's offer as `accepted`. Nothing is signed: the
//! stand-in facilitator (`facilitator.rs`) checks no signature, but every field is well-formed
//! (addresses 0x + 40 hex digits, the nonce 0x + 64, the signature 0x + 130).
//!
//! wrk makes each request's header itself ([`Payer::lua`]) without encoding anything per
//! request: the document is laid out so that its last [`COUNTER_DIGITS`] nonce digits start on
//! a multiple of 3 bytes (spaces after its opening brace), so the base64 of the whole is the
//! base64 of the text before them, then of each group of 3 digits (a table of the 4 096
//! groups, made once), then of the text after them. A nonce is the run's tag, a batch number (a
//! new one for each load run and each single request) and the request's number in its batch.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The chain the offer names (anvil's id: nothing here reaches a chain).
pub const NETWORK: &str = "eip155:31337";
/// The token contract, its EIP-712 name and version.
pub const ASSET: &str = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
pub const ASSET_NAME: &str = "USDC";
pub const ASSET_VERSION: &str = "2";
/// The operator's address, paid.
pub const PAY_TO: &str = "0x28f5aA1a4DDCEa8Ad9cb4b4B2Ad0c87e05D1B335";
/// The one payer every paid request comes from (one ledger account, as the unpaid creates'
/// one subject).
pub const PAYER: &str = "0xBD44CF622856DF3Ac24b5300181eab8Ac9F5FdB1";
/// What a call costs: 0.01 of a 6-decimal token.
pub const PRICE: u64 = 10_000;
/// The header a paid request carries.
pub const HEADER: &str = "PAYMENT-SIGNATURE";
/// The nonce's digits that count the requests of a batch (4 groups of 3).
pub const COUNTER_DIGITS: usize = 12;

/// The route's `payment.accept.x402` table (after the route's own keys), with `facilitator`.
pub fn accept_toml(facilitator: SocketAddr) -> String {
    format!(
        "[routes.payment.accept.x402]\nfacilitator = \"http://{facilitator}\"\n\
         offers = [{{ scheme = \"exact\", network = \"{NETWORK}\", asset = \"{ASSET}\", asset_name = \"{ASSET_NAME}\", asset_version = \"{ASSET_VERSION}\", pay_to = \"{PAY_TO}\", per_call = {PRICE} }}]\n"
    )
}

/// Payments for one resource, each with its own nonce.
#[derive(Debug)]
pub struct Payer {
    /// The document up to the nonce's fixed part (padded: see the module's text).
    head: String,
    /// The document after the nonce.
    tail: String,
    /// Distinguishes this run's nonces from another run's.
    tag: u64,
    next_batch: AtomicU64,
}

impl Payer {
    /// Payments for the resource at `url`, valid until `valid_before` (Unix seconds).
    pub fn new(url: &str, valid_before: i64) -> Payer {
        let signature = "5a".repeat(65);
        let head = format!(
            r#"{{"x402Version":2,"accepted":{{"scheme":"exact","network":"{NETWORK}","amount":"{PRICE}","asset":"{ASSET}","payTo":"{PAY_TO}","maxTimeoutSeconds":300,"extra":{{"name":"{ASSET_NAME}","version":"{ASSET_VERSION}"}}}},"resource":{{"url":"{url}","description":"","mimeType":"application/json"}},"payload":{{"signature":"0x{signature}","authorization":{{"from":"{PAYER}","to":"{PAY_TO}","value":"{PRICE}","validAfter":"0","validBefore":"{valid_before}","nonce":"0x"#
        );
        // The counter starts after the head and the nonce's fixed digits: on a multiple of 3.
        let fixed = 64 - COUNTER_DIGITS;
        let pad = (3 - (head.len() + fixed) % 3) % 3;
        let head = format!("{{{}{}", " ".repeat(pad), &head[1..]);
        let tag = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Payer {
            head,
            tail: r#""}}}"#.to_string(),
            tag,
            next_batch: AtomicU64::new(0),
        }
    }

    /// A batch of nonces no other batch of this payer shares.
    pub fn batch(&self) -> u64 {
        self.next_batch.fetch_add(1, Ordering::Relaxed)
    }

    /// The document up to and with the nonce's fixed digits, a multiple of 3 bytes long.
    fn head(&self, batch: u64) -> String {
        let fixed = format!("{:016x}{batch:016x}", self.tag);
        let fixed = format!("{fixed:0<width$}", width = 64 - COUNTER_DIGITS);
        format!("{}{fixed}", self.head)
    }

    /// The payment document of request `n` of `batch`.
    pub fn document(&self, batch: u64, n: u64) -> String {
        format!(
            "{}{n:0width$x}{}",
            self.head(batch),
            self.tail,
            width = COUNTER_DIGITS
        )
    }

    /// The `PAYMENT-SIGNATURE` header of request `n` of `batch`.
    pub fn header(&self, batch: u64, n: u64) -> String {
        STANDARD.encode(self.document(batch, n))
    }

    /// The wrk script's part for `batch`: a `request` function that sends each request with
    /// the header of the next number of the batch (0, 1, 2, …).
    pub fn lua(&self, batch: u64) -> String {
        let head = STANDARD.encode(self.head(batch));
        let tail = STANDARD.encode(&self.tail);
        let groups: Vec<String> = (0..4096u32)
            .map(|g| format!("\"{}\"", STANDARD.encode(format!("{g:03x}"))))
            .collect();
        format!(
            r#"local groups = {{{groups}}}
local head = "{head}"
local tail = "{tail}"
local n = 0
request = function()
  local k = n
  n = n + 1
  local d = k % 4096; k = (k - d) / 4096
  local c = k % 4096; k = (k - c) / 4096
  local b = k % 4096; k = (k - b) / 4096
  local a = k % 4096
  wrk.headers["{HEADER}"] = head .. groups[a + 1] .. groups[b + 1] .. groups[c + 1] .. groups[d + 1] .. tail
  return wrk.format()
end
"#,
            groups = groups.join(",")
        )
    }

    /// What [`Payer::lua`]'s function computes for request `n` (its tests' check).
    #[cfg(test)]
    fn header_by_parts(&self, batch: u64, n: u64) -> String {
        let group = |g: u64| STANDARD.encode(format!("{g:03x}"));
        let mut s = STANDARD.encode(self.head(batch));
        for shift in [36, 24, 12, 0] {
            s.push_str(&group((n >> shift) % 4096));
        }
        s.push_str(&STANDARD.encode(&self.tail));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use interlingua::payment::x402::{accept, wire};

    fn payer() -> Payer {
        Payer::new(
            "http://127.0.0.1:1/api/v1/agents/did:nv:bench/tasks",
            1_900_000_000,
        )
    }

    #[test]
    fn a_header_is_the_route_s_offer_with_a_well_formed_authorization() {
        let p = payer();
        let header = p.header(p.batch(), 7);
        let doc = wire::decode_payment(&header).expect("a payment");
        let config = format!(
            "[admin]\naddress = \"127.0.0.1:0\"\n[[listeners]]\naddress = \"127.0.0.1:0\"\n\
             [[upstreams]]\nname = \"up\"\naddress = \"127.0.0.1:1\"\n\
             [[routes]]\nname = \"paid\"\nmatch = {{ path_prefix = \"/\" }}\nupstream = \"up\"\n\
             front = \"nevermined\"\nback = \"mip003\"\n{}",
            accept_toml("127.0.0.1:2".parse().expect("an address"))
        );
        let setup = interlingua::setup::parse(&config, "test").expect("a config");
        let offers = setup.config.routes[0].x402.as_ref().expect("x402");
        let (read, offer) = accept::read(offers, "http://h/", accept::Presented::Header(&header))
            .expect("one of the offers");
        assert_eq!(offer.amount, PRICE);
        let auth = &doc.payload["authorization"];
        let hex = |v: &serde_json::Value, digits: usize| {
            let s = v.as_str().expect("a string");
            s.len() == digits + 2
                && s.starts_with("0x")
                && s[2..].chars().all(|c| c.is_ascii_hexdigit())
        };
        assert!(hex(&auth["nonce"], 64), "{auth}");
        assert!(hex(&auth["from"], 40) && hex(&auth["to"], 40), "{auth}");
        assert!(hex(&doc.payload["signature"], 130));
        assert!(auth["nonce"]
            .as_str()
            .expect("nonce")
            .ends_with("000000000007"));
        assert_eq!(auth["validBefore"], "1900000000");
        assert!(accept::reference(&read).is_some());
    }

    #[test]
    fn every_request_and_every_batch_has_a_nonce_of_its_own() {
        let p = payer();
        let (a, b) = (p.batch(), p.batch());
        let nonce = |batch, n| {
            let doc = wire::decode_payment(&p.header(batch, n)).expect("a payment");
            doc.payer_and_nonce().expect("payer and nonce").1
        };
        let all = [nonce(a, 0), nonce(a, 1), nonce(b, 0), nonce(b, 4097)];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x, y);
            }
        }
    }

    #[test]
    fn the_lua_parts_make_the_same_header() {
        let p = payer();
        let batch = p.batch();
        for n in [0, 1, 4095, 4096, 123_456_789, (1 << 48) - 1] {
            assert_eq!(p.header_by_parts(batch, n), p.header(batch, n), "{n}");
        }
        let lua = p.lua(batch);
        assert!(lua.contains(&STANDARD.encode(p.head(batch))));
        assert!(
            lua.contains("\"MDAw\"") && lua.contains("\"ZmZm\""),
            "000 and fff"
        );
        assert!(lua.contains("wrk.headers[\"PAYMENT-SIGNATURE\"]"));
    }
}
