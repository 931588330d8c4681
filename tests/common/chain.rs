//! A real x402 stack on loopback: a local EVM node with the tests' stablecoin, the official x402
//! SDK (Python, x402 2.25.0) as facilitator, as a paid agent and as a paying client. Nothing here
//! is a stand-in: payments are EIP-3009 authorizations signed by the SDK's client, verified and
//! settled by the SDK's facilitator in a real ERC-20 on a real node (x402 v2, `exact` on EVM:
//! https://github.com/coinbase/x402/blob/main/specs/schemes/exact/scheme_exact_evm.md).
//!
//! | piece | what runs | made by |
//! |---|---|---|
//! | [`Chain`] | anvil (chain id 31337, [`NETWORK`]; or another) with `Token.sol` deployed as "USDC" version "2" | [`Chain::start`], [`Chain::start_on`] |
//! | [`Facilitator`] | `tests/peers/x402_facilitator.py`: `/supported`, `/verify`, `/settle`, `/log` | [`Facilitator::start`] |
//! | [`PaidAgent`] | `tests/peers/x402_agent.py`: a MIP-003 agent whose `/start_job` costs a price (x402 version 2, or 1); `tests/peers/x402_a2a_agent.py`: an A2A agent asking in band | [`PaidAgent::start`], [`PaidAgent::version_1`], [`PaidAgent::in_band`] |
//! | [`Call`] | `tests/peers/x402_client.py`: one request, paid, replayed or plain | [`Call::pay`], [`Call::replay`], [`Call::send`] |
//!
//! The chain tools come from [`super::node`], the Python from [`super::peers::x402_python`]. Every
//! call here blocks (run it from `spawn_blocking` in an async test), every wait has [`DEADLINE`],
//! and every process is killed when its value is dropped. Start a [`Chain`] from the test's own
//! thread or any other: anvil is started from testkit's spawner thread, through `setpriv
//! --pdeathsig KILL`, so it ends with the test process even when that is killed; the Python peers
//! watch their parent the same way.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::node::{anvil, token_build};
use super::peers::{run_json, x402_python, Peer};
use super::process::lines;
use super::DEADLINE;

/// The CAIP-2 network of anvil's default chain id, 31337. The SDK's facilitator never compares a
/// payment's network with its node's chain id, so a payment must name this one.
pub const NETWORK: &str = "eip155:31337";
/// Permit2's canonical address, through which `upto` payments move tokens.
pub const PERMIT2: &str = "0x000000000022D473030F116dDEE9F6B43aC78BA3";
/// The token's EIP-712 name and version: what a payment requirement's `extra` must say.
pub const TOKEN_NAME: &str = "USDC";
pub const TOKEN_VERSION: &str = "2";

/// An account: its checksummed address and its private key (0x-hex).
#[derive(Debug, Clone)]
pub struct Account {
    pub address: String,
    pub key: String,
}

/// A running anvil with the tests' token deployed; killed when dropped.
pub struct Chain {
    anvil: Child,
    // Drained by a thread of its own: anvil logs every RPC call, and a full pipe would stall it
    // (behind a mutex only so that a chain can be shared between threads).
    _log: std::sync::Mutex<Receiver<String>>,
    port: u16,
    id: u64,
    token: String,
    accounts: Vec<Account>,
    python: PathBuf,
    _dir: tempfile::TempDir,
}

impl Chain {
    /// Starts anvil on a free port of 127.0.0.1, waits (up to [`DEADLINE`]) until it answers
    /// `eth_chainId`, and deploys the token from dev account 0, which alone may mint. Installs
    /// the chain tools and the x402 virtualenv first if they are missing. Panics if anything fails.
    pub fn start() -> Chain {
        Chain::start_on(31337)
    }

    /// [`Chain::start`] with another chain id (what x402 version 1 names a network by: 84532 is
    /// its `base-sepolia`).
    pub fn start_on(chain_id: u64) -> Chain {
        let python = x402_python();
        let build = token_build();
        let dir = tempfile::tempdir().expect("a directory for anvil");
        let config = dir.path().join("anvil.json");
        let mut command = Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(anvil())
            .args(["--host", "127.0.0.1", "--port", "0", "--chain-id"])
            .arg(chain_id.to_string())
            .arg("--config-out")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = testkit::spawner::spawn(command).expect("setpriv and anvil run");
        let log = lines(child.stdout.take().expect("piped stdout"));
        let started = Instant::now();
        let port = loop {
            let left = DEADLINE.saturating_sub(started.elapsed());
            let line = log
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("anvil did not say where it listens"));
            if let Some(addr) = line.strip_prefix("Listening on ") {
                break addr
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.trim().parse::<u16>().ok())
                    .unwrap_or_else(|| panic!("anvil: unexpected line {line:?}"));
            }
        };
        let mut chain = Chain {
            id: chain_id,
            anvil: child,
            _log: std::sync::Mutex::new(log),
            port,
            token: String::new(),
            accounts: Vec::new(),
            python,
            _dir: dir,
        };
        let id = chain.rpc_until_ready("eth_chainId");
        assert_eq!(id, json!(format!("{chain_id:#x}")), "anvil's chain id");
        chain.accounts = dev_accounts(&config);
        let deployed = chain.chain_script(&[
            "deploy".into(),
            "--build".into(),
            build.display().to_string(),
            "--key".into(),
            chain.accounts[0].key.clone(),
            "--name".into(),
            TOKEN_NAME.into(),
            "--version".into(),
            TOKEN_VERSION.into(),
        ]);
        chain.token = deployed["address"]
            .as_str()
            .expect("an address")
            .to_string();
        chain
    }

    /// Its CAIP-2 network (`eip155:<chain id>`).
    pub fn network(&self) -> String {
        format!("eip155:{}", self.id)
    }

    /// The node's JSON-RPC URL.
    pub fn rpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The token's address (checksummed).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Dev account `i` of anvil's ten (its default mnemonic's public test keys, as anvil reported
    /// them): 0 deployed the token and mints, 1 is the facilitator's; each holds 10 000 ETH.
    pub fn dev_account(&self, i: usize) -> &Account {
        &self.accounts[i]
    }

    /// A fresh account, with no ETH and no tokens.
    pub fn new_account(&self) -> Account {
        let made = self.chain_script(&["new-account".into()]);
        Account {
            address: made["address"].as_str().expect("address").to_string(),
            key: made["key"].as_str().expect("key").to_string(),
        }
    }

    /// Places Permit2 and x402's `upto` proxy at the addresses the SDK settles `upto` through
    /// (`tests/peers/x402/Permit2.sol`); call once, before any `upto` payment.
    pub fn enable_upto(&self) {
        let placed = self.chain_script(&[
            "upto".into(),
            "--build".into(),
            token_build().display().to_string(),
            "--key".into(),
            self.accounts[0].key.clone(),
        ]);
        assert_eq!(placed["permit2"], PERMIT2, "{placed}");
    }

    /// The payer's one-time approval of Permit2 for its tokens (with 1 ETH for the gas), which
    /// an `upto` payment needs.
    pub fn approve_permit2(&self, payer: &Account) {
        self.chain_script(&[
            "approve-permit2".into(),
            "--token".into(),
            self.token.clone(),
            "--key".into(),
            payer.key.clone(),
        ]);
    }

    /// A fresh account holding `amount` of the token (and no ETH).
    pub fn funded_account(&self, amount: u128) -> Account {
        let account = self.new_account();
        if amount > 0 {
            self.mint(&account.address, amount);
        }
        account
    }

    /// Mints `amount` atomic units (6 decimals) of the token to `to`, in a mined transaction.
    pub fn mint(&self, to: &str, amount: u128) {
        self.chain_script(&[
            "mint".into(),
            "--token".into(),
            self.token.clone(),
            "--key".into(),
            self.accounts[0].key.clone(),
            "--to".into(),
            to.into(),
            "--amount".into(),
            amount.to_string(),
        ]);
    }

    /// The token's `balanceOf(owner)`, read with `eth_call` (no Python: tests read balances often).
    pub fn balance_of(&self, owner: &str) -> u128 {
        // balanceOf(address): its selector, then the address left-padded to 32 bytes.
        let owner = owner.trim_start_matches("0x").to_ascii_lowercase();
        assert_eq!(owner.len(), 40, "an address: {owner}");
        let data = format!("0x70a08231{owner:0>64}");
        let answer = self.rpc(
            "eth_call",
            json!([{"to": self.token, "data": data}, "latest"]),
        );
        let hex = answer.as_str().expect("eth_call answers hex");
        u128::from_str_radix(hex.trim_start_matches("0x"), 16)
            .unwrap_or_else(|e| panic!("balanceOf answered {hex}: {e}"))
    }

    /// A mined transaction's receipt (`eth_getTransactionReceipt`): `status` "0x1" if it
    /// succeeded, `from`, `to`, `logs`, `gasUsed`. Panics if the node knows no such transaction.
    pub fn receipt(&self, tx: &str) -> Value {
        let receipt = self.rpc("eth_getTransactionReceipt", json!([tx]));
        assert!(!receipt.is_null(), "no receipt for {tx}");
        receipt
    }

    /// One JSON-RPC call; its `result`. Panics on an error answer.
    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let (status, body) = http(self.port, "POST", "/", Some(&request.to_string()))
            .unwrap_or_else(|e| panic!("{method}: {e}"));
        let answer: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method}: not JSON ({e}), status {status}: {body}"));
        match answer.get("result") {
            Some(result) if answer.get("error").is_none() => result.clone(),
            _ => panic!("{method} failed: {answer}"),
        }
    }

    /// `method` (no parameters) called until the node answers it; fails after [`DEADLINE`].
    fn rpc_until_ready(&mut self, method: &str) -> Value {
        let started = Instant::now();
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": []});
        loop {
            if let Ok(Some(status)) = self.anvil.try_wait() {
                panic!("anvil exited ({status})");
            }
            if let Ok((200, body)) = http(self.port, "POST", "/", Some(&request.to_string())) {
                let answer: Value = serde_json::from_str(&body).expect("JSON-RPC answers JSON");
                return answer["result"].clone();
            }
            assert!(
                started.elapsed() < DEADLINE,
                "anvil did not answer {method}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Runs `tests/peers/x402_chain.py --rpc <this node> ARGS…`; its JSON answer.
    fn chain_script(&self, args: &[String]) -> Value {
        let mut all = vec!["--rpc".to_string(), self.rpc_url()];
        all.extend_from_slice(args);
        run_json(&self.python, "x402_chain.py", &all, DEADLINE)
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let _ = self.anvil.kill();
        let _ = self.anvil.wait();
    }
}

/// The dev accounts anvil wrote to its `--config-out` file.
fn dev_accounts(config: &std::path::Path) -> Vec<Account> {
    let text = std::fs::read_to_string(config).expect("anvil's --config-out file");
    let config: Value = serde_json::from_str(&text).expect("anvil's config is JSON");
    let strings = |key: &str| -> Vec<String> {
        config[key]
            .as_array()
            .unwrap_or_else(|| panic!("no {key} in anvil's config"))
            .iter()
            .map(|v| v.as_str().expect("a string").to_string())
            .collect()
    };
    let accounts: Vec<Account> = strings("available_accounts")
        .into_iter()
        .zip(strings("private_keys"))
        .map(|(address, key)| Account { address, key })
        .collect();
    assert!(
        accounts.len() >= 2,
        "anvil made {} accounts",
        accounts.len()
    );
    accounts
}

/// The x402 SDK's facilitator, settling on a [`Chain`] with dev account 1; killed when dropped.
pub struct Facilitator {
    peer: Peer,
    auth: Option<String>,
    address: String,
}

impl Facilitator {
    /// Starts it on a free port. With `auth`, its API answers 401 unless a request's
    /// `Authorization` header is exactly `auth` (e.g. `"Bearer s3cret"`); `/log` is always open.
    pub fn start(chain: &Chain, auth: Option<&str>) -> Facilitator {
        let signer = chain.dev_account(1);
        let (rpc, network) = (chain.rpc_url(), chain.network());
        let mut args = vec![
            "--rpc",
            rpc.as_str(),
            "--key",
            &signer.key,
            "--network",
            &network,
        ];
        if let Some(auth) = auth {
            args.extend(["--auth", auth]);
        }
        Facilitator {
            peer: Peer::start(&chain.python, "x402_facilitator.py", &args, &[]),
            auth: auth.map(str::to_string),
            address: signer.address.clone(),
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer.port)
    }

    /// Its socket address.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.peer.port))
    }

    /// The address that sends its settlements (and pays their gas).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Every request it answered on its API, in order: `{"method", "path", "authorization",
    /// "status", "body"}` (the body as parsed JSON; null for `/supported`).
    pub fn log(&self) -> Vec<Value> {
        let (status, body) =
            http(self.peer.port, "GET", "/log", None).expect("the facilitator's /log");
        assert_eq!(status, 200, "/log: {body}");
        let log: Value = serde_json::from_str(&body).expect("/log is JSON");
        log["requests"].as_array().expect("requests").clone()
    }

    /// From now on each `/settle` waits, before anything reaches the chain, until
    /// [`Facilitator::release`].
    pub fn hold_settles(&self) {
        let (status, body) = http(self.peer.port, "POST", "/_hold", Some("{}")).expect("/_hold");
        assert_eq!(status, 200, "/_hold: {body}");
    }

    /// How many settles are waiting.
    pub fn held_settles(&self) -> u64 {
        let (status, body) = http(self.peer.port, "GET", "/_held", None).expect("/_held");
        assert_eq!(status, 200, "/_held: {body}");
        let v: Value = serde_json::from_str(&body).expect("/_held is JSON");
        v["waiting"].as_u64().expect("waiting")
    }

    /// Lets the waiting settles go on to the chain (`send`), or drops them unsent; holding ends.
    pub fn release(&self, send: bool) {
        let body = json!({ "send": send }).to_string();
        let (status, answer) =
            http(self.peer.port, "POST", "/_release", Some(&body)).expect("/_release");
        assert_eq!(status, 200, "/_release: {answer}");
    }

    /// The paths of [`Facilitator::log`]'s requests to `/verify` and `/settle`, in order.
    pub fn calls(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter_map(|r| r["path"].as_str())
            .filter(|p| *p != "/supported")
            .map(str::to_string)
            .collect()
    }
}

/// A MIP-003 agent served behind the x402 SDK's FastAPI payment middleware: `POST /start_job`
/// costs `price` atomic units of the chain's token, paid to `pay_to`; killed when dropped.
pub struct PaidAgent {
    peer: Peer,
    price: u128,
    pay_to: String,
}

impl PaidAgent {
    /// Starts it on a free port, verifying and settling through `facilitator` (with its auth).
    pub fn start(chain: &Chain, facilitator: &Facilitator, price: u128, pay_to: &str) -> PaidAgent {
        PaidAgent::serve("x402_agent.py", chain, facilitator, price, pay_to, None)
    }

    /// The agent paid as x402 version 1 servers were (`X-PAYMENT`, the demand in the 402's
    /// body, the network by name): on a chain started with [`Chain::start_on`] 84532, version
    /// 1's `base-sepolia`.
    pub fn version_1(
        chain: &Chain,
        facilitator: &Facilitator,
        price: u128,
        pay_to: &str,
    ) -> PaidAgent {
        assert_eq!(
            chain.network(),
            "eip155:84532",
            "version 1 names the network"
        );
        PaidAgent::serve(
            "x402_agent.py",
            chain,
            facilitator,
            price,
            pay_to,
            Some("base-sepolia"),
        )
    }

    /// An A2A agent paid in band instead (the A2A x402 extension: `tests/peers/x402_a2a_agent.py`,
    /// a2a-sdk's server asking in an input-required task, taking the payment from the next
    /// message), its card at `/.well-known/agent-card.json`.
    pub fn in_band(
        chain: &Chain,
        facilitator: &Facilitator,
        price: u128,
        pay_to: &str,
    ) -> PaidAgent {
        assert!(
            facilitator.auth.is_none(),
            "the A2A agent calls its facilitator without auth"
        );
        PaidAgent::serve("x402_a2a_agent.py", chain, facilitator, price, pay_to, None)
    }

    fn serve(
        script: &str,
        chain: &Chain,
        facilitator: &Facilitator,
        price: u128,
        pay_to: &str,
        version_1: Option<&str>,
    ) -> PaidAgent {
        let (url, price_text, network) = (facilitator.url(), price.to_string(), chain.network());
        let mut args = vec![
            "--facilitator",
            &url,
            "--asset",
            chain.token(),
            "--pay-to",
            pay_to,
            "--price",
            &price_text,
            "--network",
            version_1.unwrap_or(&network),
            "--name",
            TOKEN_NAME,
            "--version",
            TOKEN_VERSION,
        ];
        if let Some(auth) = &facilitator.auth {
            args.extend(["--facilitator-auth", auth]);
        }
        if version_1.is_some() {
            args.extend(["--x402-version", "1"]);
        }
        PaidAgent {
            peer: Peer::start(&chain.python, script, &args, &[]),
            price,
            pay_to: pay_to.to_string(),
        }
    }

    /// The URL of `path` on the agent.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.peer.port)
    }

    pub fn price(&self) -> u128 {
        self.price
    }

    pub fn pay_to(&self) -> &str {
        &self.pay_to
    }

    /// Every job it started, in order: `{"job_id", "identifier_from_purchaser", "input_data",
    /// "payer"}` (the A2A agent: every task paid for, `{"task_id", "text", "payer",
    /// "extensions"}`).
    pub fn jobs(&self) -> Vec<Value> {
        let (status, body) = http(self.peer.port, "GET", "/_jobs", None).expect("/_jobs");
        assert_eq!(status, 200, "/_jobs: {body}");
        let jobs: Value = serde_json::from_str(&body).expect("/_jobs is JSON");
        jobs["jobs"].as_array().expect("jobs").clone()
    }
}

/// What the SDK's client saw of one request (`tests/peers/x402_client.py`).
#[derive(Debug, Clone)]
pub struct Paid {
    pub status: u16,
    /// The answer's body: JSON, or a string when it was not JSON.
    pub body: Value,
    /// How many requests went on the wire (2: a 402, then the paid retry).
    pub sent: u64,
    /// The `PAYMENT-SIGNATURE` of the last request sent, as sent (base64).
    pub payment_signature: Option<String>,
    /// The answer's `PAYMENT-REQUIRED`, decoded.
    pub payment_required: Option<Value>,
    /// The answer's `PAYMENT-RESPONSE`, decoded.
    pub payment_response: Option<Value>,
}

/// One HTTP request for the SDK's client to make: [`Call::pay`] pays a 402, [`Call::replay`]
/// sends a given `PAYMENT-SIGNATURE`, [`Call::send`] sends it plain.
#[derive(Debug, Clone)]
pub struct Call {
    method: String,
    url: String,
    json: Option<Value>,
    headers: Vec<String>,
}

impl Call {
    pub fn post(url: &str, json: Value) -> Call {
        Call {
            method: "POST".into(),
            url: url.into(),
            json: Some(json),
            headers: Vec::new(),
        }
    }

    pub fn get(url: &str) -> Call {
        Call {
            method: "GET".into(),
            url: url.into(),
            json: None,
            headers: Vec::new(),
        }
    }

    /// The call with one more request header.
    pub fn header(mut self, name: &str, value: &str) -> Call {
        self.headers.push(format!("{name}: {value}"));
        self
    }

    /// Made by the SDK's httpx transport for `payer`, which pays a 402 in the chain's token
    /// (up to 1 000 000 atomic units).
    pub fn pay(&self, chain: &Chain, payer: &Account) -> Paid {
        self.run(
            &chain.python,
            &[
                "--key".into(),
                payer.key.clone(),
                "--asset".into(),
                chain.token().into(),
                "--network".into(),
                chain.network(),
            ],
        )
    }

    /// Sent once with `PAYMENT-SIGNATURE: signature`, paying nothing more.
    pub fn replay(&self, signature: &str) -> Paid {
        self.run(&x402_python(), &["--signature".into(), signature.into()])
    }

    /// Sent once as it is.
    pub fn send(&self) -> Paid {
        self.run(&x402_python(), &[])
    }

    fn run(&self, python: &std::path::Path, mode: &[String]) -> Paid {
        let mut args = vec![
            "--url".to_string(),
            self.url.clone(),
            "--method".into(),
            self.method.clone(),
        ];
        if let Some(json) = &self.json {
            args.extend(["--json".into(), json.to_string()]);
        }
        for h in &self.headers {
            args.extend(["--header".into(), h.clone()]);
        }
        args.extend_from_slice(mode);
        let out = run_json(python, "x402_client.py", &args, DEADLINE);
        let text = |key: &str| out[key].as_str().map(str::to_string);
        let object = |key: &str| Some(out[key].clone()).filter(|v| !v.is_null());
        Paid {
            status: out["status"].as_u64().expect("status") as u16,
            body: out["body"].clone(),
            sent: out["sent"].as_u64().expect("sent"),
            payment_signature: text("payment_signature"),
            payment_required: object("payment_required"),
            payment_response: object("payment_response"),
        }
    }
}

/// One HTTP/1.1 exchange with 127.0.0.1:`port` (`Connection: close`, read to the end): the status
/// and the body. A body sent is JSON. `Err` says what failed (nothing listening, for one).
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Result<(u16, String), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(DEADLINE))
        .map_err(|e| e.to_string())?;
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or(""));
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    let answer = String::from_utf8(answer).map_err(|e| e.to_string())?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no header end in {answer:?}"))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return Err(format!(
            "a chunked answer, which this reader does not undo: {head}"
        ));
    }
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}
