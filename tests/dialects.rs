//! The other dialects (A2A, LMOS, MultiAgentEval, NEAR AI, OpenAI chat) through the real proxy,
//! against the sample agents: each new dialect as a front over a MIP-003 agent, and as a back
//! under a MIP-003 front, the whole lifecycle.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{client, config, Proxy};
use interlingua::sample::{self, Options};
use serde_json::{json, Value};

/// How long a sample job takes in these tests.
const WORK: Duration = Duration::from_millis(400);

async fn agent<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener, Options) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(serve(l, Options { work: WORK }));
    addr
}

fn route(name: &str, prefix: &str, upstream: &str, front: &str, back: &str, extra: &str) -> String {
    format!(
        "[[routes]]\nname = \"{name}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\nupstream = \"{upstream}\"\n\
         front = \"{front}\"\nback = \"{back}\"\npoll_interval = \"50ms\"\npoll_max_interval = \"200ms\"\n{extra}\n"
    )
}

fn upstream(name: &str, addr: SocketAddr) -> String {
    format!("[[upstreams]]\nname = \"{name}\"\naddress = \"{addr}\"\nread_timeout = \"5s\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_front_over_a_mip003_agent() {
    let mip = agent(sample::mip003::serve).await;
    let proxy = Proxy::start(&config(
        "",
        &format!(
            "{}{}",
            upstream("mip", mip),
            route("chat", "/chat", "mip", "openai_chat", "mip003", "")
        ),
    ));
    let http = client();
    let resp = http
        .post(proxy.url("/chat/v1/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "HELLO", "{body}");
    let resp = http
        .post(proxy.url("/chat/v1/chat/completions"))
        .json(&json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    println!("{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
}
