//! What a client that blocks on a task waits beyond the task itself: a blocking A2A send through
//! interlingua (front `a2a`, back `mip003`) to interlingua's sample MIP-003 agent whose jobs
//! take [`JOB`], against the same job followed directly (`start_job`, then `/status` every
//! [`DIRECT_POLL`]). Rounds alternate the two; the added latency is the median of the per-round
//! differences. Not a throughput figure: one client, one task at a time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::http::Request;
use crate::stack::{Env, Route};

/// How long each job takes on the agent.
pub const JOB: Duration = Duration::from_secs(2);
/// How often the direct client polls the agent.
const DIRECT_POLL: Duration = Duration::from_millis(5);

/// The outcome: each round's wall time, direct and through interlingua, in milliseconds.
#[derive(Debug, Clone)]
pub struct Blocking {
    pub direct_ms: Vec<f64>,
    pub proxied_ms: Vec<f64>,
}

impl Blocking {
    /// The median of the per-round differences (interlingua − direct), in milliseconds.
    pub fn added_ms(&self) -> f64 {
        let mut d: Vec<f64> = self
            .proxied_ms
            .iter()
            .zip(&self.direct_ms)
            .map(|(p, d)| p - d)
            .collect();
        median(&mut d)
    }

    pub fn line(&self) -> String {
        let (mut d, mut p) = (self.direct_ms.clone(), self.proxied_ms.clone());
        format!(
            "blocking A2A send over a {:.0} s MIP-003 job: {:.0} ms through interlingua, {:.0} ms direct (polling every {} ms): {:.0} ms added (median of {} rounds)",
            JOB.as_secs_f64(),
            median(&mut p),
            median(&mut d),
            DIRECT_POLL.as_millis(),
            self.added_ms(),
            self.direct_ms.len()
        )
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Starts the sample agent (in this process) and an interlingua in front of it, and measures
/// `rounds` rounds.
pub fn measure(env: &Env, rounds: usize) -> Result<Blocking, String> {
    let agent = start_agent()?;
    let config = env.interlingua_dir(
        "blocking-a2a",
        agent,
        &[Route::A2aOverMip { prefix: "/".into() }],
    )?;
    let proxy = env.serve("blocking-a2a", &config, Duration::from_secs(30))?;
    let mut out = Blocking {
        direct_ms: Vec::new(),
        proxied_ms: Vec::new(),
    };
    for round in 0..rounds.max(1) {
        let text = format!("blocking round {round}");
        out.direct_ms.push(direct(agent, &text)?);
        out.proxied_ms.push(proxied(proxy.addr, &text)?);
    }
    Ok(out)
}

/// interlingua's sample MIP-003 agent, on a runtime of its own for the rest of the run.
fn start_agent() -> Result<SocketAddr, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            samples::mip003::serve(listener, samples::Options::work(JOB)).await;
        });
    });
    Ok(addr)
}

fn limit() -> Duration {
    JOB * 10
}

/// A job followed directly: milliseconds from `start_job` to the first `/status` that says
/// completed.
fn direct(agent: SocketAddr, text: &str) -> Result<f64, String> {
    let t0 = Instant::now();
    let a = Request::post(
        "/start_job",
        format!(
            r#"{{"identifier_from_purchaser":"0123456789abcdef","input_data":{{"text":"{text}"}}}}"#
        ),
    )
    .send(agent, limit())?;
    let v: Value =
        serde_json::from_str(&a.body).map_err(|e| format!("start_job: {e}: {}", a.body))?;
    let id = v["id"]
        .as_str()
        .ok_or("start_job answered no id")?
        .to_string();
    loop {
        let s = Request::get(format!("/status?job_id={id}")).send(agent, limit())?;
        if s.body.contains("\"completed\"") {
            return Ok(t0.elapsed().as_secs_f64() * 1000.0);
        }
        if t0.elapsed() > limit() {
            return Err(format!("the direct job did not complete: {}", s.body));
        }
        std::thread::sleep(DIRECT_POLL);
    }
}

/// The same job as a blocking A2A 1.0 `SendMessage`: milliseconds to the answer.
fn proxied(proxy: SocketAddr, text: &str) -> Result<f64, String> {
    let t0 = Instant::now();
    let mut req = Request::post(
        "/",
        format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"text":"{text}"}}]}}}}}}"#
        ),
    );
    req.headers.push(("A2A-Version".into(), "1.0".into()));
    let a = req.send(proxy, limit())?;
    let took = t0.elapsed().as_secs_f64() * 1000.0;
    if !a.body.contains("TASK_STATE_COMPLETED") {
        return Err(format!(
            "the blocking send answered {}: {}",
            a.status, a.body
        ));
    }
    Ok(took)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn added_latency_is_the_median_of_paired_differences() {
        let b = Blocking {
            direct_ms: vec![2000.0, 2010.0, 2005.0],
            proxied_ms: vec![2060.0, 2200.0, 2045.0],
        };
        assert_eq!(b.added_ms(), 60.0);
        assert!(
            b.line().contains("60 ms added (median of 3 rounds)"),
            "{}",
            b.line()
        );
    }
}
